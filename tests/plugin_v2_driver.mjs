// Loads pigeond's opencode 2.x plugin outside opencode, in node, with a stand-in of the
// plugin context opencode 2.x passes to setup, for tests/test_opencode_plugin_v2.py.
//
// The stand-in ctx has only what the plugin may use, ctx.tool.transform: it runs the
// plugin's callback with an editor whose add() records each tool, and answers with a
// registration ({dispose}) as opencode 2.x's Promise API does.  Any other use of ctx fails.
//
// stdin, one JSON object, as plugin_driver.mjs takes it:
//   plugin    absolute path of the plugin module
//   tool      the name of a tool to run (or null: only load the plugin)
//   args      the tool's input, as a model would send it
//   context   {sessionID, callID}: opencode 2.x passes the call id as `id`
//   env       variables set before the plugin loads (PIGEOND_URL, ...); null unsets one
//   replies   the daemon's answers, in order (see fetch_stub.mjs)
// stdout, one JSON object: {exports, definition: {id, setup}, transforms, tools (each added
// tool with its execute's type), ok, result | error, requests}.
import { applyEnv, stubFetch } from "./fetch_stub.mjs";

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const input = JSON.parse(Buffer.concat(chunks).toString("utf8"));
applyEnv(input.env);

const requests = [];
stubFetch(input.replies, requests);

const module = await import(input.plugin);
const definition = module.default;
const added = [];
let transforms = 0;
const ctx = {
  tool: {
    transform: async (callback) => {
      transforms += 1;
      callback({ add: (tool) => added.push(tool) });
      return { dispose: async () => {} };
    },
  },
};
await definition.setup(ctx);

const result = {
  exports: Object.keys(module),
  definition: { id: definition.id, setup: typeof definition.setup },
  transforms,
  tools: added.map(({ execute, ...rest }) => ({ ...rest, execute: typeof execute })),
  requests,
};
if (input.tool) {
  const tool = added.find((t) => t.name === input.tool);
  const controller = new AbortController();
  const context = {
    sessionID: input.context.sessionID,
    agent: "build",
    messageID: "msg_test",
    id: input.context.callID,
    signal: controller.signal,
    progress: async () => {},
    checkpoint: async () => {},
  };
  try {
    result.result = await tool.execute(input.args, context);
    result.ok = true;
  } catch (error) {
    result.ok = false;
    result.error = error instanceof Error ? error.message : String(error);
  }
}
process.stdout.write(JSON.stringify(result));
