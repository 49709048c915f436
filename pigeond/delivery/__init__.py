"""Delivery to opencode: the arbiter and its policy, turns and events, the verifier, the
session registry, each session's mode, and the opencode HTTP client they share."""
