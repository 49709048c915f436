// pigeond's opencode plugin for opencode 2.x: the same swarm_send, swarm_read, swarm_status,
// swarm_name, swarm_policy and swarm_channel tools as the 1.x plugin (their logic is
// src/tools.js, shared with it), added through opencode 2.x's plugin API.
//
// opencode 2.x loads a plugin module's default export only, a definition {id, setup}; setup
// adds each tool with ctx.tool.transform, with codemode off so that the model calls it as a
// tool of its own (with codemode on, a tool is reachable only from inside the code-mode tool).
// opencode 2.x sets OPENCODE_SESSION_ID in the agent's shell itself, so this plugin has no
// shell hook.
//
// No import of @opencode/plugin: opencode installs nothing beside a plugin file, and its
// Plugin.define only hands back the definition it is given, as the local one does.

// @include tools.js

const Plugin = { define: (definition) => definition };

// What every tool answers: the same text the 1.x tool returns, as structured output and as
// the content the model reads.
const OUTPUT_SCHEMA = {
  type: "object",
  properties: { text: { type: "string", description: "what the tool answered" } },
  required: ["text"],
  additionalProperties: false,
};

// One tool of makeTools as opencode 2.x adds it: its arguments as one JSON Schema object
// (every argument required, an optional one nullable, as opencode 1.x has them), and its
// execute given the context the shared logic reads ({sessionID, callID, abort}).
function v2Tool(name, tool) {
  return {
    name,
    description: tool.description,
    input: {
      type: "object",
      properties: tool.args,
      required: Object.keys(tool.args),
      additionalProperties: false,
    },
    output: OUTPUT_SCHEMA,
    options: { codemode: false },
    async execute(input, context) {
      const text = await tool.execute(input, {
        sessionID: context && context.sessionID,
        callID: context && context.id,
        abort: context && context.signal,
      });
      return { output: { text }, content: text };
    },
  };
}

export default Plugin.define({
  id: "pigeond-swarm",
  async setup(ctx) {
    const tools = Object.entries(makeTools(process.env)).map(([name, tool]) => v2Tool(name, tool));
    await ctx.tool.transform((editor) => {
      for (const tool of tools) editor.add(tool);
    });
  },
});
