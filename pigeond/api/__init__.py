"""The HTTP API: JSON plumbing and limits (web, http_limits), who may ask (access), how
much (flood), and the routes that turn requests into repository calls."""
