// Runs one tool of pigeond's opencode plugin outside opencode, in opencode's
// own runtime (the opencode binary with BUN_BE_BUN=1), for tests/test_opencode_plugin.py.
//
// stdin, one JSON object:
//   plugin    absolute path of the plugin module
//   tool      swarm_send | swarm_read | swarm_status (or null: only describe the plugin)
//   args      the tool's arguments, as a model would send them
//   context   what opencode passes: {sessionID, callID, directory}
//   env       variables set before the tool runs (PIGEOND_URL, ...); null unsets one
//   shell_env the input of opencode's "shell.env" hook, to run it instead of a tool
//   replies   null: the real fetch.  Else the daemon's answers, in order (the last
//             one repeats): {status, body, headers?} or {error: "ConnectionRefused"}
// stdout, one JSON object: {exports, tools, hooks, ok, output | error, requests, env};
// each request is {url, method, body, unix, headers (lower-case names), at}.
import { applyEnv, stubFetch } from "./fetch_stub.mjs";

const input = JSON.parse(await Bun.stdin.text());
applyEnv(input.env);

const requests = [];
if (input.replies) stubFetch(input.replies, requests);

const module = await import(input.plugin);
const result = { exports: Object.keys(module), tools: {}, requests };
const hooks = await module.PigeondSwarmPlugin({ directory: "/tmp" });
result.hooks = Object.keys(hooks);
if (input.shell_env) {
  const output = { env: {} };
  await hooks["shell.env"](input.shell_env, output);
  result.env = output.env;
}
for (const [name, tool] of Object.entries(hooks.tool ?? {})) {
  result.tools[name] = { description: tool.description, args: tool.args };
}
if (input.tool) {
  const controller = new AbortController();
  const context = { abort: controller.signal, messageID: "msg_test", agent: "build", ...input.context };
  try {
    result.output = await hooks.tool[input.tool].execute(input.args, context);
    result.ok = true;
  } catch (error) {
    result.ok = false;
    result.error = error instanceof Error ? error.message : String(error);
  }
}
process.stdout.write(JSON.stringify(result));
