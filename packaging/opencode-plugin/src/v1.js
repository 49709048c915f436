// pigeond's opencode plugin for opencode 1.x: the swarm_send, swarm_read, swarm_status,
// swarm_name, swarm_policy and swarm_channel tools (their logic is src/tools.js, shared with
// the 2.x plugin).
//
// It also sets OPENCODE_SESSION_ID in the shell of the agent's bash tool, which
// pigeon-send takes as its sender.
//
// opencode calls every export of a plugin module as a plugin: this file must
// export exactly one function and nothing else.

// @include tools.js

// The agent's shell gets OPENCODE_SESSION_ID, so pigeon-send run there knows
// who is sending (its --from default) without the model typing its own id.
export const PigeondSwarmPlugin = async () => ({
  tool: makeTools(process.env),
  "shell.env": async (input, output) => {
    if (input && typeof input.sessionID === "string" && SESSION_ID_RE.test(input.sessionID)) {
      output.env.OPENCODE_SESSION_ID = input.sessionID;
    }
  },
});
