// The tool logic both of pigeond's opencode plugins share (the 1.x one, src/v1.js, and the
// 2.x one, src/v2.js): the swarm_send, swarm_read, swarm_status, swarm_name, swarm_policy and
// swarm_channel tools, their descriptions and argument schemas, their output rules and
// escaping, and the calls to the daemon.  `python -m pigeond.plugin_bundles` (make plugins)
// puts it into each plugin where its adapter says `// @include tools.js`; it is never a file
// of its own in opencode's plugin folder, where opencode 1.x would load it as a plugin.
//
// Plain JavaScript with no static imports, so opencode loads each plugin as it is:
// nothing to install next to it (node:fs and node:os are imported where they
// are used, with import()).  The tools talk to the pigeond daemon over HTTP;
// the daemon queues each message on disk and is the only one that prompts the
// target session, one turn at a time.
//
// makeTools(env) gives each tool as {description, args (one JSON Schema per argument),
// execute(args, context)}, context being {sessionID, callID, abort}; execute answers with
// the text the model reads, or throws a ToolError saying what is wrong.
//
// Environment (read by opencode's process, when a tool runs):
//   PIGEOND_URL            http://HOST:PORT or unix:/path.sock.  Unset: the Unix socket
//                          $XDG_RUNTIME_DIR/pigeond/pigeond.sock when its folder is this
//                          user's alone, else /run/pigeond/pigeond.sock (the system
//                          service's) when it is there, else http://127.0.0.1:4097
//   PIGEOND_TOKEN          the bearer token, sent over TCP only (a Unix socket needs none)
//   PIGEOND_TOKEN_FILE     else the file holding it (it must be readable); else
//                          $XDG_STATE_HOME/pigeond/token (~/.local/state/...) when it is there
//   PIGEOND_SEND_RETRY_S   how long swarm_send retries an unreachable or rate-limiting
//                          daemon (default 30)

const DEFAULT_URL = "http://127.0.0.1:4097";
const SYSTEM_SOCKET = "/run/pigeond/pigeond.sock";
const DEFAULT_SEND_RETRY_S = 30;
const READ_RETRY_S = 3;
const REQUEST_TIMEOUT_MS = 5000;
const MAX_OUTPUT_BYTES = 8192;
const DEFAULT_READ_LIMIT = 10;
const MAX_READ_LIMIT = 50;
const MIN_PAYLOAD_SHOWN = 300;
const KINDS = [
  "chat",
  "task.assign",
  "status.update",
  "clarification.request",
  "clarification.reply",
  "artifact.handoff",
];
const PRIORITIES = ["urgent", "normal", "low"];
const POLICIES = ["accept", "hold", "refuse"]; // pigeond.consent.POLICIES (a test holds them together)
const ALLOW_ENTRY_RE = /^@?[A-Za-z0-9_.-]{1,128}$/; // pigeond.consent.ALLOW_ENTRY_RE
const MAX_ALLOW = 64;
const SESSION_ID_RE = /^(?:ses_[A-Za-z0-9_-]{1,128}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|mcp_[a-z0-9][a-z0-9_.-]{0,63})$/;
const MSG_ID_RE = /^msg_[A-Za-z0-9_-]{1,128}$/;
const CALL_ID_RE = /^[A-Za-z0-9_.:-]{1,128}$/; // pigeond.api.authority.CALL_ID_RE
const CHANNEL_RE = /^[a-z0-9][a-z0-9_.-]{0,63}$/;
const THREAD_RE = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$/; // pigeond's THREAD_RE (pigeond/model.py)
const NAME_RE = /^[a-z0-9][a-z0-9_.-]{0,63}$/; // pigeond's NAME_RE (pigeond/model.py)
// swarm_send's to: a session id, or @name for whoever holds the name when pigeond accepts it
const TARGET_RE = /^(?:ses_[A-Za-z0-9_-]{1,128}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|mcp_[a-z0-9][a-z0-9_.-]{0,63}|@[a-z0-9][a-z0-9_.-]{0,63})$/;
const CURSOR_RE = /^(cur_[0-9]{1,18}|msg_[A-Za-z0-9_-]{1,128})$/;
const HISTORY_CURSOR_RE = /^cur_[0-9]{1,18}$/; // a channel's history pages by cur_N only
const CHANNEL_ACTIONS = ["join", "leave", "list", "history"];
const CHANNEL_HINT = "a channel name like team.backend";
const TOKEN_RE = /^[A-Za-z0-9_-]{43,512}$/; // what pigeond writes: 32 random bytes, URL-safe
const HEADER_SAFE_RE = /^[\x21-\x7e]+$/;
const GROUP_OTHER_BITS = 0o077;
const encoder = new TextEncoder();

// -- arguments -----------------------------------------------------------------

class ToolError extends Error {}

function checkArgs(tool, args, allowed) {
  if (args === null || typeof args !== "object" || Array.isArray(args)) {
    throw new ToolError(`${tool}: the arguments must be a JSON object`);
  }
  for (const key of Object.keys(args)) {
    if (!allowed.includes(key)) {
      throw new ToolError(`${tool}: unknown argument '${key}' (it takes ${allowed.join(", ")})`);
    }
  }
}

function present(args, key) {
  return args[key] !== undefined && args[key] !== null;
}

function stringArg(tool, args, key, pattern, hint) {
  if (!present(args, key)) return undefined;
  const value = args[key];
  if (typeof value !== "string") {
    throw new ToolError(`${tool}: '${key}' must be a string, not ${JSON.stringify(value)}`);
  }
  if (pattern && !pattern.test(value)) {
    throw new ToolError(`${tool}: '${key}' must be ${hint}, not ${JSON.stringify(value)}`);
  }
  return value;
}

function oneOf(tool, args, key, choices) {
  if (!present(args, key)) return undefined;
  const value = args[key];
  if (!choices.includes(value)) {
    throw new ToolError(
      `${tool}: '${key}' must be one of ${choices.join(", ")}, not ${JSON.stringify(value)}`,
    );
  }
  return value;
}

function parseSendArgs(args) {
  const tool = "swarm_send";
  checkArgs(tool, args, ["to", "channel", "payload", "kind", "priority", "steer", "reply_to", "thread", "expects_reply", "reply_within_s"]);
  const to = stringArg(tool, args, "to", TARGET_RE, "a session id (ses_..., a Claude Code session uuid, mcp_name) or @name");
  const channel = stringArg(tool, args, "channel", CHANNEL_RE, CHANNEL_HINT);
  if ((to === undefined) === (channel === undefined)) {
    throw new ToolError(`${tool}: give exactly one of 'to' (a session id) or 'channel'`);
  }
  const payload = stringArg(tool, args, "payload");
  if (payload === undefined || payload.trim() === "") {
    throw new ToolError(`${tool}: 'payload' (the message text) is required and must not be empty`);
  }
  const priority = oneOf(tool, args, "priority", PRIORITIES);
  const steer = booleanArg(tool, args, "steer");
  if (steer && priority !== "urgent") {
    throw new ToolError(`${tool}: 'steer' goes with priority 'urgent'`);
  }
  return {
    to,
    channel,
    payload,
    kind: oneOf(tool, args, "kind", KINDS),
    priority,
    steer,
    reply_to: stringArg(tool, args, "reply_to", MSG_ID_RE, "a msg_id like msg_..."),
    thread: stringArg(tool, args, "thread", THREAD_RE, "a thread id like thr_..."),
    expects_reply: booleanArg(tool, args, "expects_reply"),
    reply_within_s: secondsArg(tool, args, "reply_within_s"),
  };
}

function booleanArg(tool, args, key) {
  if (!present(args, key)) return undefined;
  if (typeof args[key] !== "boolean") {
    throw new ToolError(`${tool}: '${key}' must be true or false, not ${JSON.stringify(args[key])}`);
  }
  return args[key];
}

const MAX_REPLY_WITHIN_S = 30 * 24 * 3600;

function secondsArg(tool, args, key) {
  if (!present(args, key)) return undefined;
  const value = args[key];
  if (!Number.isInteger(value) || value < 1 || value > MAX_REPLY_WITHIN_S) {
    throw new ToolError(
      `${tool}: '${key}' must be a whole number of seconds from 1 to ${MAX_REPLY_WITHIN_S}, not ${JSON.stringify(value)}`,
    );
  }
  return value;
}

function parseReadArgs(args) {
  const tool = "swarm_read";
  checkArgs(tool, args, ["since", "limit"]);
  const since = stringArg(tool, args, "since", CURSOR_RE, "a cursor from swarm_read (cur_N) or a msg_id");
  let limit = DEFAULT_READ_LIMIT;
  if (present(args, "limit")) {
    limit = args.limit;
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_READ_LIMIT) {
      throw new ToolError(
        `${tool}: 'limit' must be an integer from 1 to ${MAX_READ_LIMIT}, not ${JSON.stringify(args.limit)}`,
      );
    }
  }
  return { since, limit };
}

function parseNameArgs(args) {
  const tool = "swarm_name";
  checkArgs(tool, args, ["name"]);
  const hint = "lower-case letters, digits, '.', '_' or '-', starting with a letter or digit, at most 64";
  const name = stringArg(tool, args, "name", NAME_RE, hint);
  if (name === undefined) throw new ToolError(`${tool}: 'name' is required (${hint})`);
  return { name };
}

function parsePolicyArgs(args) {
  const tool = "swarm_policy";
  checkArgs(tool, args, ["policy", "allow", "release", "steer"]);
  const policy = oneOf(tool, args, "policy", POLICIES);
  let allow;
  if (present(args, "allow")) {
    const value = args.allow;
    if (!Array.isArray(value) || value.length > MAX_ALLOW || !value.every((v) => typeof v === "string" && ALLOW_ENTRY_RE.test(v))) {
      throw new ToolError(`${tool}: 'allow' must be a list of at most ${MAX_ALLOW} session ids (ses_...), not ${JSON.stringify(value)}`);
    }
    allow = value;
  }
  const release = booleanArg(tool, args, "release") === true;
  const steer = booleanArg(tool, args, "steer");
  for (const [name, given] of [["allow", allow], ["steer", steer]]) {
    if (given !== undefined && policy === undefined) {
      throw new ToolError(`${tool}: '${name}' goes with 'policy' (${POLICIES.join(", ")})`);
    }
  }
  return { policy, allow, release, steer };
}

function parseChannelArgs(args) {
  const tool = "swarm_channel";
  checkArgs(tool, args, ["action", "channel", "since"]);
  const action = oneOf(tool, args, "action", CHANNEL_ACTIONS);
  if (action === undefined) throw new ToolError(`${tool}: 'action' is required (${CHANNEL_ACTIONS.join(", ")})`);
  const channel = stringArg(tool, args, "channel", CHANNEL_RE, CHANNEL_HINT);
  if (channel === undefined && action !== "list") {
    throw new ToolError(`${tool}: action "${action}" needs 'channel' (${CHANNEL_HINT})`);
  }
  const since = stringArg(tool, args, "since", HISTORY_CURSOR_RE, "the cursor the last history ended with (cur_N)");
  if (since !== undefined && action !== "history") {
    throw new ToolError(`${tool}: 'since' goes with action "history"`);
  }
  return { action, channel, since };
}

function parseStatusArgs(args) {
  const tool = "swarm_status";
  checkArgs(tool, args, ["msg_id"]);
  const msgId = stringArg(tool, args, "msg_id", MSG_ID_RE, "a msg_id like msg_...");
  if (msgId === undefined) throw new ToolError(`${tool}: 'msg_id' is required`);
  return { msgId };
}

function callerSession(tool, context) {
  const session = context && context.sessionID;
  if (typeof session !== "string" || !SESSION_ID_RE.test(session)) {
    throw new ToolError(`${tool}: opencode gave no usable session id (${JSON.stringify(session)})`);
  }
  return session;
}

// A request acting for this session (its name, policy, channels) names the tool call
// making it, so pigeond finds exactly this call running in the session's transcript; with
// no usable call id from opencode, pigeond finds the call by its input.
function ownCall(context) {
  const id = context && context.callID;
  return typeof id === "string" && CALL_ID_RE.test(id) ? { call_id: id } : {};
}

// A retried tool call (same session, same call id) must not send twice: the
// daemon treats a msg_id it already has, with the same content, as the same message.
async function messageIdFor(session, callID) {
  if (typeof callID !== "string" || callID === "") {
    return "msg_tool_" + crypto.randomUUID().replaceAll("-", "");
  }
  const digest = await crypto.subtle.digest("SHA-256", encoder.encode(`${session}\n${callID}`));
  const hex = Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
  return "msg_tool_" + hex.slice(0, 32);
}

// -- the daemon ----------------------------------------------------------------

async function statOrNull(fs, path) {
  try {
    return await fs.stat(path);
  } catch {
    return null;
  }
}

// The daemon's Unix socket, when there is one to trust: in the user's runtime
// folder only if that folder is the user's alone (nobody else can have put a
// socket there), else the system service's.  A process of another user that
// squats on the TCP port while pigeond is down cannot pose as the daemon then.
async function discoverSocket(env) {
  const fs = await import("node:fs/promises");
  const runtime = env.XDG_RUNTIME_DIR || "";
  if (runtime.startsWith("/") && typeof process.getuid === "function") {
    const folder = runtime.replace(/\/+$/, "") + "/pigeond";
    const [dir, sock] = [await statOrNull(fs, folder), await statOrNull(fs, folder + "/pigeond.sock")];
    if (
      dir && sock && dir.isDirectory() && sock.isSocket() &&
      dir.uid === process.getuid() && (dir.mode & GROUP_OTHER_BITS) === 0
    ) {
      return "unix:" + folder + "/pigeond.sock";
    }
  }
  const systemDir = await statOrNull(fs, SYSTEM_SOCKET.slice(0, SYSTEM_SOCKET.lastIndexOf("/")));
  const systemSock = await statOrNull(fs, SYSTEM_SOCKET);
  if (systemDir && systemSock && systemSock.isSocket() && (systemDir.mode & 0o002) === 0) {
    return "unix:" + SYSTEM_SOCKET;
  }
  return undefined;
}

function whyUnreadable(error) {
  const code = error && error.code;
  const plain = {
    ENOENT: "no such file",
    EACCES: "permission denied",
    EPERM: "permission denied",
    EISDIR: "it is a folder",
    ENOTDIR: "a folder on its path is a file",
  }[code];
  return plain || code || (error && error.message) || String(error);
}

// PIGEOND_TOKEN, else the file PIGEOND_TOKEN_FILE names (which must be
// readable), else pigeond's default token file when it is there; undefined
// when there is none: the daemon's 401 then says what is wrong.
async function clientToken(tool, env) {
  const given = (env.PIGEOND_TOKEN || "").trim();
  if (given !== "") {
    if (!HEADER_SAFE_RE.test(given)) {
      throw new ToolError(`${tool}: PIGEOND_TOKEN must be the token itself (printable ASCII, no spaces)`);
    }
    return given;
  }
  const fs = await import("node:fs/promises");
  const named = env.PIGEOND_TOKEN_FILE || "";
  if (named !== "") {
    let text;
    try {
      text = await fs.readFile(named, "utf8");
    } catch (error) {
      throw new ToolError(`${tool}: cannot read the token file PIGEOND_TOKEN_FILE=${named}: ${whyUnreadable(error)}`);
    }
    const token = text.trim();
    if (!TOKEN_RE.test(token)) {
      throw new ToolError(
        `${tool}: the token file PIGEOND_TOKEN_FILE=${named} does not hold a pigeond token ` +
          "(43 or more of A-Z a-z 0-9 _ -)",
      );
    }
    return token;
  }
  let home = env.HOME || "";
  if (home === "" && !env.XDG_STATE_HOME) home = (await import("node:os")).homedir();
  const state = env.XDG_STATE_HOME || `${home}/.local/state`;
  try {
    const token = (await fs.readFile(`${state}/pigeond/token`, "utf8")).trim();
    return TOKEN_RE.test(token) ? token : undefined;
  } catch {
    return undefined;
  }
}

async function daemonConfig(tool, env) {
  const retryRaw = (env.PIGEOND_SEND_RETRY_S || "").trim();
  const sendRetryS = retryRaw === "" ? DEFAULT_SEND_RETRY_S : Number(retryRaw);
  if (!Number.isFinite(sendRetryS) || sendRetryS < 0 || sendRetryS > 600) {
    throw new ToolError(
      `${tool}: PIGEOND_SEND_RETRY_S must be a number of seconds from 0 to 600, not ${JSON.stringify(retryRaw)}`,
    );
  }
  const raw = (env.PIGEOND_URL || "").trim() || (await discoverSocket(env)) || DEFAULT_URL;
  let base;
  let unix;
  if (raw.startsWith("unix:")) {
    unix = raw.slice("unix:".length);
    if (!unix.startsWith("/")) {
      throw new ToolError(`${tool}: PIGEOND_URL=${raw}: a unix: URL needs an absolute socket path`);
    }
    base = "http://localhost";
  } else if (/^https?:\/\/[^/\s]+(\/[^\s]*)?$/.test(raw)) {
    base = raw.replace(/\/+$/, "");
  } else {
    throw new ToolError(
      `${tool}: PIGEOND_URL must be http://HOST:PORT or unix:/path.sock, not ${JSON.stringify(raw)}`,
    );
  }
  return { tool, env, url: raw, base, unix, sendRetryS };
}

class Unreachable extends Error {}

// A 429 from pigeond's flood guard; retryAfterS is its Retry-After (whole seconds), if any.
class RateLimited extends Error {
  constructor(message, retryAfterS) {
    super(message);
    this.retryAfterS = retryAfterS;
  }
}

function whyNoAnswer(error) {
  const code = error && (error.code || (error.cause && error.cause.code));
  if (error && error.name === "TimeoutError") return `no answer within ${REQUEST_TIMEOUT_MS / 1000} s`;
  if (code === "ConnectionRefused" || code === "ECONNREFUSED") return "connection refused";
  if (code === "FailedToOpenSocket" || code === "ENOENT") return "no socket there";
  return code || (error && error.message) || String(error);
}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal && signal.aborted) return reject(new ToolError("cancelled"));
    const onAbort = () => {
      clearTimeout(timer);
      reject(new ToolError("cancelled"));
    };
    const timer = setTimeout(() => {
      if (signal) signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    if (signal) signal.addEventListener("abort", onAbort, { once: true });
  });
}

// One request; a JSON answer with its status, or Unreachable (no answer, or a
// 5xx), or RateLimited (a 429).
async function request(daemon, method, path, body, abort) {
  const signals = [AbortSignal.timeout(REQUEST_TIMEOUT_MS)];
  if (abort) signals.push(abort);
  const init = { method, signal: AbortSignal.any(signals), headers: { accept: "application/json" } };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["content-type"] = "application/json";
  }
  if (daemon.unix) {
    init.unix = daemon.unix;
  } else {
    // Only TCP needs the token (pigeond knows a Unix socket's peer by its uid).
    // Read for each request: a pigeond that starts for the first time while
    // swarm_send retries makes its token then.
    const token = await clientToken(daemon.tool, daemon.env);
    if (token) init.headers.authorization = `Bearer ${token}`;
  }
  let response;
  let text;
  try {
    response = await fetch(daemon.base + path, init);
    text = await response.text();
  } catch (error) {
    if (abort && abort.aborted) throw new ToolError("cancelled");
    throw new Unreachable(whyNoAnswer(error));
  }
  let json;
  try {
    json = text === "" ? {} : JSON.parse(text);
  } catch {
    json = { error: text.slice(0, 200) };
  }
  if (json === null || typeof json !== "object") json = { error: String(json) };
  if (response.status >= 500) {
    throw new Unreachable(`HTTP ${response.status}: ${json.error || "server error"}`);
  }
  if (response.status === 429) {
    const retryAfter = (response.headers.get("retry-after") || "").trim();
    const error = cutToBytes(String(json.error || "too many requests"), 300);
    throw new RateLimited(error, /^[0-9]{1,6}$/.test(retryAfter) ? Number(retryAfter) : undefined);
  }
  return { status: response.status, json };
}

// Retries Unreachable with backoff (0.25 s doubling to 4 s), and RateLimited
// after its Retry-After, until budgetS has passed; then throws the last one,
// its message saying how long it tried.
async function withRetries(daemon, budgetS, abort, attempt) {
  const started = Date.now();
  let delay = 250;
  let tries = 0;
  for (;;) {
    tries += 1;
    try {
      return await attempt();
    } catch (error) {
      if (!(error instanceof Unreachable || error instanceof RateLimited)) throw error;
      const left = budgetS * 1000 - (Date.now() - started);
      if (left <= 0) {
        const waited = Math.round((Date.now() - started) / 100) / 10;
        const effort = `${tries} ${tries === 1 ? "try" : "tries"} over ${waited} s`;
        if (error instanceof RateLimited) {
          const ask = error.retryAfterS === undefined ? "" : `; it asked to wait ${error.retryAfterS} s`;
          throw new RateLimited(
            `pigeond is rate-limiting (HTTP 429: ${JSON.stringify(error.message)}${ask}; ${effort})`,
            error.retryAfterS,
          );
        }
        throw new Unreachable(`pigeond is unreachable at ${daemon.url} (${error.message}; ${effort})`);
      }
      if (error instanceof RateLimited && error.retryAfterS !== undefined) {
        await sleep(Math.min(Math.max(error.retryAfterS * 1000, 100), left), abort);
      } else {
        await sleep(Math.min(delay, left), abort);
        delay = Math.min(delay * 2, 4000);
      }
    }
  }
}

function refused(tool, answer) {
  const why = answer.json && answer.json.error ? answer.json.error : JSON.stringify(answer.json);
  return new ToolError(`${tool}: pigeond refused it (HTTP ${answer.status}): ${why}`);
}

// -- output --------------------------------------------------------------------

function bytes(text) {
  return encoder.encode(text).length;
}

// The longest prefix of text within maxBytes UTF-8 bytes, never splitting a character.
function cutToBytes(text, maxBytes) {
  if (bytes(text) <= maxBytes) return text;
  let low = 0;
  let high = text.length;
  while (low < high) {
    const mid = Math.ceil((low + high) / 2);
    if (bytes(text.slice(0, mid)) <= maxBytes) low = mid;
    else high = mid - 1;
  }
  let end = low;
  const code = text.charCodeAt(end - 1);
  if (code >= 0xd800 && code <= 0xdbff) end -= 1; // a lone high surrogate
  return text.slice(0, end);
}

function isoTime(ms) {
  return typeof ms === "number" ? new Date(ms).toISOString().slice(0, 19) + "Z" : "-";
}

// What a payload (or a field) shows of each character, so that no text from a
// sender can pass for the tool's own lines, or for an envelope: & < > as the
// envelope escapes them, and so every character that reads as < or > (the rule
// of pigeond/angles.py over all of Unicode: NFKC < or > as &lt; &gt;, every other
// look-alike as its numeric reference &#xHHHH;); control characters and bidi
// overrides as visible \xNN / \uNNNN.  Tab stays a tab.
const QUOTE = "> "; // starts every payload line in swarm_read
const LINE_BREAKS = new Set(["\r\n", "\n", "\r", "\v", "\f", "\x85", "\u2028", "\u2029"]);
// BEGIN generated by `python -m pigeond.angles` (make angles): do not edit
// Unicode 14.0.0; the rule: pigeond/angles.py
const NFKC_LESS_THAN = "\uFE64\uFF1C";
const NFKC_GREATER_THAN = "\uFE65\uFF1E";
const ANGLE_LOOKALIKES = (
    "\u00AB\u00BB\u02C2\u02C3\u02F1\u02F2\u0350\u0354\u0355\u0356\u08F7\u08F8\u08F9" +
    "\u08FA\u08FB\u08FC\u08FD\u1433\u1438\u1DFE\u1DFF\u2039\u203A\u2264\u2265\u2266" +
    "\u2267\u2268\u2269\u226A\u226B\u226E\u226F\u2270\u2271\u2272\u2273\u2274\u2275" +
    "\u2276\u2277\u2278\u2279\u227A\u227B\u227C\u227D\u227E\u227F\u22B0\u22B1\u22D6" +
    "\u22D7\u22D8\u22D9\u22DA\u22DB\u22DC\u22DD\u22DE\u22DF\u22E6\u22E7\u22E8\u22E9" +
    "\u2329\u232A\u2343\u2344\u2369\u276C\u276D\u276E\u276F\u2770\u2771\u27E8\u27E9" +
    "\u27EA\u27EB\u2976\u2977\u2978\u2989\u298A\u2991\u2992\u2993\u2994\u2995\u2996" +
    "\u29C0\u29C1\u29FC\u29FD\u2A79\u2A7A\u2A7B\u2A7C\u2A7D\u2A7E\u2A7F\u2A80\u2A81" +
    "\u2A82\u2A83\u2A84\u2A85\u2A86\u2A87\u2A88\u2A89\u2A8A\u2A8B\u2A8C\u2A8D\u2A8E" +
    "\u2A8F\u2A90\u2A91\u2A92\u2A93\u2A94\u2A95\u2A96\u2A97\u2A98\u2A99\u2A9A\u2A9B" +
    "\u2A9C\u2A9D\u2A9E\u2A9F\u2AA0\u2AA1\u2AA2\u2AA3\u2AA4\u2AA5\u2AA6\u2AA7\u2AA8" +
    "\u2AA9\u2AAF\u2AB0\u2AB1\u2AB2\u2AB3\u2AB4\u2AB5\u2AB6\u2AB7\u2AB8\u2AB9\u2ABA" +
    "\u2ABB\u2ABC\u2AF7\u2AF8\u2AF9\u2AFA\u2B43\u2E16\u3008\u3009\u300A\u300B\uFE3D" +
    "\uFE3E\uFE3F\uFE40\u{E003C}\u{E003E}"
);
// END generated
const ENTITIES = new Map([
  ["&", "&amp;"],
  ["<", "&lt;"],
  [">", "&gt;"],
  ...Array.from(NFKC_LESS_THAN, (c) => [c, "&lt;"]),
  ...Array.from(NFKC_GREATER_THAN, (c) => [c, "&gt;"]),
  ...Array.from(ANGLE_LOOKALIKES, (c) => [c, "&#x" + c.codePointAt(0).toString(16).toUpperCase() + ";"]),
]);
const INVISIBLE = /^[\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069\u2028\u2029\uD800-\uDFFF]$/;
const shownCache = new Map();

function hex(code, width) {
  return code.toString(16).padStart(width, "0");
}

function showChar(ch) {
  const entity = ENTITIES.get(ch);
  if (entity) return entity;
  const code = ch.codePointAt(0);
  if (code < 0x80) {
    if ((code < 0x20 && code !== 0x09) || code === 0x7f) return "\\x" + hex(code, 2);
    return ch;
  }
  if (code <= 0x9f) return "\\x" + hex(code, 2);
  let shown = shownCache.get(code);
  if (shown === undefined) {
    if (INVISIBLE.test(ch)) shown = "\\u" + hex(code, 4);
    else shown = ch;
    if (shownCache.size < 4096) shownCache.set(code, shown);
  }
  return shown;
}

// One line of text from the daemon, escaped, line breaks included, at most maxBytes.
function field(value, maxBytes = 256) {
  let shown = "";
  for (const ch of String(value ?? "-")) shown += showChar(ch);
  return cutToBytes(shown, maxBytes);
}

function utf8Length(text) {
  let n = 0;
  for (const ch of text) {
    const code = ch.codePointAt(0);
    n += code < 0x80 ? 1 : code < 0x800 ? 2 : code < 0x10000 ? 3 : 4;
  }
  return n;
}

// A payload as swarm_read shows it after the QUOTE of its first line: units[i]
// is one character (or line break, which starts the next quoted line) as shown,
// ends[i] the bytes shown up to and including it.  It stops once past maxBytes
// (size is then Infinity): a longer payload is cut anyway.
function quotedPayload(payload, maxBytes) {
  const units = [];
  const ends = [];
  let total = 0;
  let i = 0;
  while (i < payload.length && total <= maxBytes) {
    let ch;
    if (payload.charCodeAt(i) === 13 && payload.charCodeAt(i + 1) === 10) ch = "\r\n";
    else ch = String.fromCodePoint(payload.codePointAt(i));
    const shown = LINE_BREAKS.has(ch) ? "\n" + QUOTE : showChar(ch);
    total += utf8Length(shown);
    units.push(shown);
    ends.push(total);
    i += ch.length;
  }
  const size = i < payload.length ? Infinity : total;
  // The longest prefix shown in at most cap bytes, never splitting an escape or a quote.
  const cut = (cap) => {
    let low = 0;
    let high = units.length;
    while (low < high) {
      const mid = Math.ceil((low + high) / 2);
      if (ends[mid - 1] <= cap) low = mid;
      else high = mid - 1;
    }
    return units.slice(0, low).join("");
  };
  return { size, whole: () => units.join(""), cut };
}

// Who really sent it, after its sender: "(verified)", "(person)" or "(unverified)".
function proofOf(message) {
  return message.from_verified ? ` (${field(message.from_verified)})` : "";
}

function headerLine(message, view) {
  const fields = [`from ${field(message.from)}${proofOf(message)}`, field(message.kind), field(message.priority)];
  if (message.channel) fields.push(`channel ${field(message.channel)}`);
  if (message.reply_to) fields.push(`reply_to ${field(message.reply_to)}`);
  fields.push(isoTime(view.time(message)));
  return `--- ${field(message.msg_id)} · ${fields.join(" · ")}`;
}

// Which page renderInbox draws: the inbox (swarm_read; times are the hand-offs) or a
// channel's history (swarm_channel; times are the sends: nothing of it is handed off, and a
// reader who joined later never had it whole).
const INBOX_VIEW = {
  of: "",
  whole: "it came whole in its <swarm_message> envelope",
  time: (message) => message.handed_off_at,
  again: (cursor) => `call swarm_read with since="${cursor}"`,
};

function historyView(channel) {
  return {
    of: ` on channel ${channel}`,
    whole: "the history shows no more of it",
    time: (message) => message.created_at,
    again: (cursor) => `call swarm_channel with action "history", channel "${channel}" and since="${cursor}"`,
  };
}

const PAGE_BUDGET = MAX_OUTPUT_BYTES - 500; // room for the first and last lines

function pageItems(messages, view) {
  return messages.map((message) => {
    const payload = String(message.payload ?? "");
    const marker =
      `\n[cut: ${field(message.msg_id)} has ${bytes(payload)} bytes; ${view.whole}]`;
    const header = headerLine(message, view);
    return { message, shown: quotedPayload(payload, PAGE_BUDGET), marker, header };
  });
}

// header, newline, quote, payload (or its cut and the marker), newline
function itemCost(item, cap) {
  return bytes(item.header) + 1 + QUOTE.length + 1 +
    (item.shown.size <= cap ? item.shown.size : cap + bytes(item.marker));
}

// How many of the items, from the first, get at least MIN_PAYLOAD_SHOWN bytes (one always).
function fittingCount(items) {
  let used = 0;
  let count = 0;
  for (const item of items) {
    const need = itemCost(item, MIN_PAYLOAD_SHOWN);
    if (count > 0 && used + need > PAGE_BUDGET) break;
    used += need;
    count += 1;
  }
  return count;
}

// Each message is its header line, then its payload with every line quoted
// (QUOTE), so only the tool writes lines that do not start with it: headers,
// cut markers, the first and the last line.  Each payload shows whole or cut
// to a common cap, as large as the output budget allows; messages that would
// not get even MIN_PAYLOAD_SHOWN bytes wait for the next read.
function renderInbox(page, since, limit, view = INBOX_VIEW) {
  const messages = Array.isArray(page.messages) ? page.messages : [];
  const after = since ? ` after ${since}` : "";
  if (messages.length === 0) {
    return `no messages${view.of}${after}` + (since ? ` (pass since="${since}" again later)` : "");
  }
  const items = pageItems(messages, view);
  const count = fittingCount(items);
  const shown = items.slice(0, count);
  const fits = (cap) => shown.reduce((total, item) => total + itemCost(item, cap), 0) <= PAGE_BUDGET;
  let low = MIN_PAYLOAD_SHOWN;
  let high = Math.min(PAGE_BUDGET, Math.max(...shown.map((item) => item.shown.size), MIN_PAYLOAD_SHOWN));
  while (low < high) {
    const mid = Math.ceil((low + high) / 2);
    if (fits(mid)) low = mid;
    else high = mid - 1;
  }
  const blocks = shown.map((item) => {
    const text = item.shown.size <= low ? item.shown.whole() : item.shown.cut(low) + item.marker;
    return `${item.header}\n${QUOTE}${text}`;
  });
  const more = page.has_more || count < messages.length;
  const cursor = field(count < messages.length ? shown[count - 1].message.msg_id : page.next_cursor);
  const title = `${count} message${count === 1 ? "" : "s"}${view.of}${after}`;
  const footer = more
    ? `more waiting: ${view.again(cursor)}`
    : `no more; next time ${view.again(cursor)} for newer ones only`;
  return [`${title} (limit ${limit}):`, ...blocks, footer].join("\n");
}

// Replies this session owes (and is owed), as lines swarm_read puts before the inbox:
// ids, sessions, kinds and states only (no sender's text: a line without the QUOTE is
// never one), at most MAX_OWED_LINES a side.
const MAX_OWED_LINES = 20;

function renderOwed(owed) {
  const lines = [];
  const side = (items, line) => {
    for (const item of items.slice(0, MAX_OWED_LINES)) {
      const state = item.state === "open" ? "" : `, ${field(item.state)}`;
      const due = item.due_at != null ? `; due ${isoTime(item.due_at)}` : "";
      lines.push(line(item) + ` (${field(item.kind)}${state}${due})`);
    }
    if (items.length > MAX_OWED_LINES) lines.push(`... and ${items.length - MAX_OWED_LINES} more`);
  };
  side(owed.owes || [], (o) => `you owe a reply to ${field(o.msg_id)} from ${field(o.creditor)}`);
  side(owed.owed || [], (o) => `${field(o.debtor)} owes you a reply to ${field(o.msg_id)}`);
  if (lines.length && (owed.owes || []).length) {
    lines.push('(answer with swarm_send and reply_to set to that msg_id)');
  }
  return lines;
}

function renderStatus(message) {
  if (message.state === "fanned_out") return renderChannelStatus(message);
  const target = message.to ? `to ${field(message.to)}` : `on channel ${field(message.channel)}`;
  const parts = [`${field(message.msg_id)} ${target}: ${field(message.state)}`];
  if (message.from_verified) parts.push(`sender ${field(message.from_verified)}`);
  if (message.attempts) parts.push(`attempts ${field(message.attempts)}`);
  if (message.handed_off_at != null) parts.push(`handed off ${isoTime(message.handed_off_at)}`);
  if (message.verified_at != null) parts.push(`seen in the transcript ${isoTime(message.verified_at)}`);
  if (message.answered_at != null) {
    const by = message.answer_message_id ? ` (reply ${field(message.answer_message_id)})` : "";
    parts.push(`answered ${isoTime(message.answered_at)}${by}`);
  }
  if (message.state === "queued" && (message.attempts || message.last_error) && message.next_retry_at != null) {
    parts.push(`next try ${isoTime(message.next_retry_at)}`);
  }
  const wait = message.waiting_on_permission;
  if (wait) parts.push(renderPermissionWait(message.to, wait));
  if (message.hold && message.hold.kind === "brake") {
    parts.push(`held for a person: ${field(message.hold.reason, 500)}`);
  } else if (message.last_error) {
    parts.push(`last error: ${field(message.last_error, 500)}`);
  }
  if (message.thread) parts.push(`thread ${field(message.thread)}`);
  return parts.join("; ");
}

// The target stopped in the turn handling this message: opencode asks a permission
// (bash, an edit, ...) that nobody at its terminal gave; a person answers it with
// `pigeon permissions` / `pigeon permission answer` or the TUI.
function renderPermissionWait(target, wait) {
  const patterns = Array.isArray(wait.patterns) ? wait.patterns.join(" ") : "";
  const what = patterns ? `${field(wait.permission)} \`${field(patterns, 200)}\`` : field(wait.permission);
  return `waiting on a permission in ${field(target)}: ${what} (request ${field(wait.id)},` +
    ` asked ${isoTime(wait.asked_at)}; a person answers it: pigeon permissions)`;
}

// swarm_status of a channel message (fanned_out): each member's copy, its state and how far
// along the receipt chain it came (accepted, handed_off, seen, answered), as GET
// /swarm/message/<id> lists them, then who was left out and why.  Every line of the list
// is the tool's own ("- "); each field is escaped, so none can start a line or a tag.
function renderChannelStatus(message) {
  const deliveries = Array.isArray(message.deliveries) ? message.deliveries : [];
  const skipped = Array.isArray(message.skipped) ? message.skipped : [];
  const head = `${field(message.msg_id)} on channel ${field(message.channel)}: fanned_out`;
  if (deliveries.length === 0 && skipped.length === 0) {
    return `${head} to nobody (no other member when it was sent; it stays in the channel's history)`;
  }
  const left = skipped.length ? `; not delivered to ${counted(skipped.length, "member")}` : "";
  const title = `${head}, a copy to each of ${counted(deliveries.length, "member")}${left}:`;
  const copy = (d) =>
    `${field(d && d.to)}: ${field(d && d.state)}, receipt ${field(d && d.receipt)} (copy ${field(d && d.msg_id)})`;
  const leftOut = (s) => `${field(s && s.session)}: not delivered (${field(s && s.reason)})`;
  const lines = [title, ...listLines(deliveries, copy), ...listLines(skipped, leftOut)];
  if (deliveries.length > 0) {
    lines.push("(swarm_status with a copy's msg_id shows its attempts, times and last error)");
  }
  return lines.join("\n");
}

function counted(n, noun) {
  const shown = field(n);
  return `${shown} ${noun}${shown === "1" ? "" : "s"}`;
}

// The lines of a list, at most MAX_LIST_LINES, then how many more there are.
const MAX_LIST_LINES = 50;

function listLines(items, line) {
  const lines = items.slice(0, MAX_LIST_LINES).map((item) => `- ${line(item)}`);
  if (items.length > MAX_LIST_LINES) lines.push(`... and ${items.length - MAX_LIST_LINES} more`);
  return lines;
}

// swarm_send to a channel: the 202 lists each member's copy and who was left out, and why.
function renderFanOut(msgId, channel, answer) {
  const deliveries = answer.deliveries;
  const skipped = Array.isArray(answer.skipped) ? answer.skipped : [];
  let text = `sent ${msgId} on channel ${channel}: `;
  if (deliveries.length === 0 && skipped.length === 0) {
    text += "no other member, so nobody got it (it stays in the channel's history)";
  } else {
    text += `a copy to each of ${counted(deliveries.length, "member")}`;
    const held = deliveries.filter((d) => d && d.held === true).length;
    if (held > 0) text += ` (${held} of them held by that member's own policy until it lets it in)`;
  }
  if (skipped.length > 0) {
    const why = skipped.slice(0, MAX_LIST_LINES).map((s) => `${field(s && s.session)} (${field(s && s.reason)})`);
    if (skipped.length > MAX_LIST_LINES) why.push(`... and ${skipped.length - MAX_LIST_LINES} more`);
    text += `; not delivered to ${counted(skipped.length, "member")}: ${why.join("; ")}`;
  }
  return text;
}

// swarm_channel list without a channel: the calling session's channels.
function renderChannels(channels) {
  const items = Array.isArray(channels) ? channels : [];
  if (items.length === 0) return 'you are a member of no channel (join one with swarm_channel action "join")';
  const line = (c) => {
    const last = c.last_message_at != null ? `last message ${isoTime(c.last_message_at)}` : "no message yet";
    return `${field(c.channel)}: ${counted(c.members, "member")}, ${last}`;
  };
  return [`you are a member of ${counted(items.length, "channel")}:`, ...listLines(items, line)].join("\n");
}

// swarm_channel list with a channel: its members, in the order they joined.
function renderMembers(channel, answer, session) {
  const members = Array.isArray(answer.members) ? answer.members : [];
  if (members.length === 0) return `${channel} has no members (swarm_channel action "join" makes you one)`;
  const most = answer.max_members != null ? `, at most ${field(answer.max_members)}` : "";
  const line = (m) => {
    const tags = [m.name ? `@${field(m.name)}` : "", m.session === session ? "you" : ""].filter(Boolean);
    const shown = tags.length ? ` (${tags.join(", ")})` : "";
    return `${field(m.session)}${shown}, joined ${isoTime(m.joined_at)}`;
  };
  const title = `${channel}: ${counted(members.length, "member")}${most}, in the order they joined:`;
  return [title, ...listLines(members, line)].join("\n");
}

function channelRefused(what, answer) {
  const why = answer.json && answer.json.error ? answer.json.error : JSON.stringify(answer.json);
  return new ToolError(`swarm_channel: ${what}: pigeond refused it (HTTP ${answer.status}): ${field(why, 300)}`);
}

// -- the tools -----------------------------------------------------------------

// opencode marks every property of a plugin tool as required, so an optional
// one is nullable: the model passes null for "not given".
function optional(type, description, choices) {
  const schema = { type: [type, "null"], description };
  if (choices) schema.enum = [...choices, null];
  return schema;
}

function describe(text) {
  return text.replace(/\s+/g, " ").trim();
}

function makeTools(env) {
  const swarm_send = {
    description: describe(`
      Send a message to another agent's session (to: its session id, or "@name" for the session
      that claimed that name with swarm_name) or to a channel (every member but you gets its own
      copy; see swarm_channel), through the pigeond daemon.
      It is queued on disk at once and reaches the target's transcript when that session is free,
      wrapped in <swarm_message from="your session id" ...>.  Returns the msg_id and its state
      (for a channel: how many members got it, and who did not, and why); follow it with
      swarm_status.  Safe to retry: the same call never sends twice.`),
    args: {
      to: optional("string", "the target session id (ses_...) or @name; null when sending to a channel"),
      channel: optional("string", "a channel name: fanned out to every member but you, each its own copy; null when sending to a session"),
      payload: { type: "string", description: "the message text" },
      kind: optional("string", `what the message is: ${KINDS.join(", ")}; null for chat`, KINDS),
      priority: optional("string", "urgent, normal or low; null for normal (urgent goes first)", PRIORITIES),
      steer: optional("boolean", "urgent only: true asks that it go into the target's running turn, read at its next step (opencode 2.x, when the target's policy allows it), not after it; null: after it"),
      reply_to: optional("string", "the msg_id this message answers (msg_...); null if none"),
      thread: optional("string", "the thread it belongs to (thr_...); null: the thread of reply_to, else a new one"),
      expects_reply: optional("boolean", "whether the target owes you a reply; null: yes for task.assign and clarification.request, else no"),
      reply_within_s: optional("integer", "seconds the target has to reply once it has the message; null for pigeond's default (an hour)"),
    },
    async execute(args, context) {
      const send = parseSendArgs(args);
      const session = callerSession("swarm_send", context);
      const daemon = await daemonConfig("swarm_send", env);
      const msgId = await messageIdFor(session, context.callID);
      const body = { ...send, from: session, msg_id: msgId };
      for (const key of Object.keys(body)) if (body[key] === undefined) delete body[key];
      const abort = context.abort;
      let answer;
      try {
        answer = await withRetries(daemon, daemon.sendRetryS, abort, () =>
          request(daemon, "POST", "/swarm/send", body, abort),
        );
      } catch (error) {
        if (error instanceof Unreachable) {
          throw new ToolError(
            `swarm_send: the message was NOT sent: ${error.message}. ` +
              "Check that the pigeond service runs; calling swarm_send again is safe.",
          );
        }
        if (error instanceof RateLimited) {
          throw new ToolError(
            `swarm_send: the message was NOT sent: ${error.message}. ` +
              "Calling swarm_send again later is safe (the same call never sends twice).",
          );
        }
        throw error;
      }
      if (answer.status === 404 && send.to && send.to.startsWith("@")) {
        const why = answer.json && answer.json.error ? answer.json.error : `nobody holds ${send.to}`;
        throw new ToolError(
          `swarm_send: the message was NOT sent: ${why}. Check the name (or ask its session to ` +
            "claim it with swarm_name); nothing was queued.",
        );
      }
      if (answer.status === 404 && send.to) {
        // opencode has no such session: refused at once, nothing queued
        const why = answer.json && answer.json.error ? answer.json.error : `no session ${send.to}`;
        throw new ToolError(
          `swarm_send: the message was NOT sent: ${why}. Check the session id (a typo, or a ` +
            "session that was deleted); nothing was queued.",
        );
      }
      if (answer.status === 403 && answer.json && answer.json.policy) {
        // the target's consent: its inbound policy refuses this sender
        throw new ToolError(
          `swarm_send: the message was NOT sent: ${answer.json.error}. The target does not take ` +
            "messages from you now; nothing was queued.",
        );
      }
      if (answer.status !== 202) throw refused("swarm_send", answer);
      if (answer.json.held) {
        // a conversation brake holds it for a person: stored, not delivered until released
        return `held: ${field(answer.json.held.reason, 500)} (${msgId} is stored and waits for ` +
          "a person to release or drop it; sending it again will not help)";
      }
      if (send.channel && Array.isArray(answer.json.deliveries)) {
        return renderFanOut(msgId, send.channel, answer.json);
      }
      let state = "queued";
      try {
        const status = await request(daemon, "GET", `/swarm/message/${msgId}`, undefined, abort);
        if (status.status === 200 && status.json.state) state = status.json.state;
      } catch {
        // The message is on disk; its state is only a courtesy.
      }
      // opencode could not be asked whether the target exists (unreachable): say so
      const unchecked = send.to && answer.json.target_checked === false
        ? " (opencode could not be asked whether the session exists; it waits in the queue)"
        : "";
      return `sent ${msgId} ${send.to ? `to ${send.to}` : `on channel ${send.channel}`}: ${state}${unchecked}`;
    },
  };

  const swarm_read = {
    description: describe(`
      Read the swarm messages handed to this session (its inbox), oldest first, at most
      ${MAX_OUTPUT_BYTES} bytes.  Pass since (the cursor the previous read ended with) to get only
      newer ones; limit is how many (default ${DEFAULT_READ_LIMIT}, at most ${MAX_READ_LIMIT}).
      Each message is a line "--- msg_id · from session · kind · priority · time" and then its
      payload, every payload line starting with "${QUOTE}" (& < > shown as &amp; &lt; &gt;, control
      characters as \\xNN): a line without "${QUOTE}" is never a sender's text.  First come the
      replies this session owes ("you owe a reply to msg_... from ses_...") and is owed.`),
    args: {
      since: optional("string", "the cursor the last swarm_read ended with (cur_N) or a msg_id; null for the oldest"),
      limit: optional("integer", `how many messages, 1 to ${MAX_READ_LIMIT}; null for ${DEFAULT_READ_LIMIT}`),
    },
    async execute(args, context) {
      const { since, limit } = parseReadArgs(args);
      const session = callerSession("swarm_read", context);
      const daemon = await daemonConfig("swarm_read", env);
      const query = new URLSearchParams({ session, limit: String(limit) });
      if (since) query.set("since", since);
      const answer = await daemonCall("swarm_read", daemon, `/swarm/inbox?${query}`, context.abort);
      if (answer.status !== 200) throw refused("swarm_read", answer);
      const inbox = renderInbox(answer.json, since, limit);
      const owed = await daemonCall("swarm_read", daemon, `/swarm/owed?${new URLSearchParams({ session })}`, context.abort);
      // a daemon older than owed replies has no such route: the inbox alone, as before
      if (owed.status === 404) return inbox;
      if (owed.status !== 200) return `${inbox}\n(owed replies not listed: HTTP ${owed.status})`;
      const lines = renderOwed(owed.json);
      return lines.length ? `${lines.join("\n")}\n${inbox}` : inbox;
    },
  };

  const swarm_status = {
    description: describe(`
      Where a swarm message is: queued, handed_off (given to the target session), failed, expired
      or cancelled, with attempts, times and the last error; for a hand-off, when it was seen in
      the target's transcript, when the target's turn answered it, and whether that turn waits
      for a person to answer a permission request.  For a message sent to a channel (fanned_out): each member's copy, its state and receipt, and who did not get it.`),
    args: {
      msg_id: { type: "string", description: "the msg_id swarm_send returned (msg_...)" },
    },
    async execute(args, context) {
      const { msgId } = parseStatusArgs(args);
      const daemon = await daemonConfig("swarm_status", env);
      const answer = await daemonCall("swarm_status", daemon, `/swarm/message/${msgId}`, context.abort);
      if (answer.status === 404) throw new ToolError(`swarm_status: pigeond has no message ${msgId}`);
      if (answer.status !== 200) throw refused("swarm_status", answer);
      return renderStatus(answer.json);
    },
  };

  const swarm_name = {
    description: describe(`
      Claim a name for this session (like reviewer or builder-2), so other agents can send to
      you with swarm_send to "@name" instead of your session id.  A session has one name:
      claiming another gives the first up.  A name another live session holds is refused.`),
    args: {
      name: { type: "string", description: "the name: lower-case letters, digits, '.', '_' or '-'" },
    },
    async execute(args, context) {
      const { name } = parseNameArgs(args);
      // this session's own name only: the session is opencode's, never an argument
      const session = callerSession("swarm_name", context);
      const daemon = await daemonConfig("swarm_name", env);
      const abort = context.abort;
      let answer;
      try {
        answer = await withRetries(daemon, READ_RETRY_S, abort, () =>
          request(daemon, "POST", "/swarm/names", { name, session, ...ownCall(context) }, abort),
        );
      } catch (error) {
        if (error instanceof Unreachable || error instanceof RateLimited) {
          throw new ToolError(`swarm_name: ${error.message}`);
        }
        throw error;
      }
      if (answer.status === 409) {
        const holder = answer.json && answer.json.session ? field(answer.json.session) : "another session";
        throw new ToolError(`swarm_name: the name ${name} is held by ${holder}, a live session; choose another name`);
      }
      if (answer.status !== 200) throw refused("swarm_name", answer);
      const released = answer.json.released ? ` (you gave up ${field(answer.json.released)})` : "";
      return `you are now ${name}: others reach you with swarm_send to "@${name}"${released}`;
    },
  };

  const swarm_policy = {
    description: describe(`
      Decide which swarm messages reach this session (your consent).  policy "accept" (the
      default) lets every message in; "hold" keeps them stored and waiting (they still expire)
      until you release them or switch back to "accept", which releases everything held, in order;
      "refuse" makes senders' swarm_send fail at once.  allow lists session ids that always get
      through.  release: true lets the held messages in now and keeps the policy.  steer: true
      lets an urgent message whose sender asks for it go into your running turn (read at its
      next step) rather than after it; off unless you turn it on.  With no arguments it says
      your policy and how many messages wait.  Only your own session's policy.`),
    args: {
      policy: optional("string", `${POLICIES.join(", ")}; null to leave it as it is`, POLICIES),
      allow: { type: ["array", "null"], items: { type: "string" }, description: "session ids that always get through (replaces the list); null keeps the list" },
      release: optional("boolean", "true: let the held messages in now; null or false: no"),
      steer: optional("boolean", "allow urgent messages to steer your running turn; null: as it is"),
    },
    async execute(args, context) {
      const { policy, allow, release, steer } = parsePolicyArgs(args);
      // this session's own policy only: the session is opencode's, never an argument
      const session = callerSession("swarm_policy", context);
      const daemon = await daemonConfig("swarm_policy", env);
      const abort = context.abort;
      const call = (method, path, body) =>
        withRetries(daemon, READ_RETRY_S, abort, () => request(daemon, method, path, body, abort));
      const lines = [];
      try {
        if (policy !== undefined) {
          const body = { policy, by: session, ...ownCall(context) };
          if (allow !== undefined) body.allow = allow;
          if (steer !== undefined) body.steer = steer;
          const answer = await call("PUT", `/swarm/policy/${session}`, body);
          if (answer.status !== 200) throw refused("swarm_policy", answer);
          const steering = answer.json.steer ? "; urgent messages may steer your running turn" : "";
          lines.push(`your policy is now ${answer.json.policy}${steering}: ${answer.json.held} message(s) held, ${answer.json.released} released`);
        }
        if (release) {
          const answer = await call("POST", `/swarm/release/${session}`, ownCall(context));
          if (answer.status !== 200) throw refused("swarm_policy", answer);
          lines.push(`released ${answer.json.released} held message(s): they come in your next turn`);
        }
        const answer = await call("GET", `/swarm/policy/${session}`, undefined);
        if (answer.status !== 200) throw refused("swarm_policy", answer);
        const allowed = answer.json.allow.length ? answer.json.allow.map((a) => field(a)).join(", ") : "nobody";
        lines.push(`policy: ${answer.json.policy}; always let through: ${allowed}; steering: ${answer.json.steer ? "allowed" : "off"}; held now: ${answer.json.held}`);
      } catch (error) {
        if (error instanceof Unreachable || error instanceof RateLimited) {
          throw new ToolError(`swarm_policy: ${error.message}`);
        }
        throw error;
      }
      return lines.join("\n");
    },
  };

  const swarm_channel = {
    description: describe(`
      Channels: named groups of sessions.  A message sent with swarm_send to a channel reaches
      every member but the sender, each as its own copy in its own transcript.  action "join" or
      "leave": this session joins or leaves channel (only this session, never another).  "list":
      without channel, the channels this session is in; with it, that channel's members.
      "history": what was sent to channel, oldest first, including what came before this session
      joined; pass since (the cursor the last history ended with) for newer ones only.  History
      payloads are shown as swarm_read shows them: every line starts with "${QUOTE}".`),
    args: {
      action: { type: "string", enum: CHANNEL_ACTIONS, description: `${CHANNEL_ACTIONS.join(", ")}` },
      channel: optional("string", "the channel (like team.backend); null only for list (your channels)"),
      since: optional("string", "history only: the cursor the last history ended with (cur_N); null for the oldest"),
    },
    async execute(args, context) {
      const { action, channel, since } = parseChannelArgs(args);
      // joins and leaves this session only: the session is opencode's, never an argument
      const session = callerSession("swarm_channel", context);
      const daemon = await daemonConfig("swarm_channel", env);
      const abort = context.abort;
      const call = async (method, path, body) => {
        try {
          return await withRetries(daemon, READ_RETRY_S, abort, () => request(daemon, method, path, body, abort));
        } catch (error) {
          if (error instanceof Unreachable || error instanceof RateLimited) {
            throw new ToolError(`swarm_channel: ${error.message}`);
          }
          throw error;
        }
      };
      const members = `/swarm/channels/${channel}/members`;
      if (action === "join") {
        const answer = await call("POST", members, { session, ...ownCall(context) });
        if (answer.status !== 200 && answer.status !== 201) throw channelRefused(`cannot join ${channel}`, answer);
        const count = counted(answer.json.members, "member");
        if (answer.json.joined === false) return `you are a member of ${channel} already (${count})`;
        return `you joined ${channel} (${count}): every message sent to it from now reaches you as ` +
          `your own copy; swarm_send with channel "${channel}" reaches the other members`;
      }
      if (action === "leave") {
        const own = ownCall(context).call_id;
        const query = own === undefined ? "" : `?${new URLSearchParams({ call_id: own })}`;
        const answer = await call("DELETE", `${members}/${session}${query}`, undefined);
        if (answer.status === 404) return `you are not a member of ${channel}: nothing changed`;
        if (answer.status !== 200) throw channelRefused(`cannot leave ${channel}`, answer);
        return `you left ${channel}: its new messages no longer reach you (copies already queued for you still come)`;
      }
      if (action === "history") {
        const page = async (limit) => {
          const query = new URLSearchParams({ limit: String(limit) });
          if (since) query.set("since", since);
          const answer = await call("GET", `/swarm/channel/${channel}?${query}`, undefined);
          if (answer.status !== 200) throw channelRefused(`cannot read ${channel}`, answer);
          return answer.json;
        };
        const view = historyView(channel);
        let found = await page(DEFAULT_READ_LIMIT);
        const messages = Array.isArray(found.messages) ? found.messages : [];
        const fit = fittingCount(pageItems(messages, view));
        // a history pages by cur_N only: when not all fit, ask for those that do, whose
        // next_cursor is the one to go on from
        if (fit < messages.length) found = await page(fit);
        return renderInbox(found, since, DEFAULT_READ_LIMIT, view);
      }
      if (channel === undefined) {
        const answer = await call("GET", `/swarm/channels?${new URLSearchParams({ session })}`, undefined);
        if (answer.status !== 200) throw channelRefused("cannot list your channels", answer);
        return renderChannels(answer.json.channels);
      }
      const answer = await call("GET", `/swarm/channels/${channel}`, undefined);
      if (answer.status !== 200) throw channelRefused(`cannot list ${channel}`, answer);
      return renderMembers(channel, answer.json, session);
    },
  };

  return { swarm_send, swarm_read, swarm_status, swarm_name, swarm_policy, swarm_channel };
}

async function daemonCall(tool, daemon, path, abort) {
  try {
    return await withRetries(daemon, READ_RETRY_S, abort, () => request(daemon, "GET", path, undefined, abort));
  } catch (error) {
    if (error instanceof Unreachable || error instanceof RateLimited) {
      throw new ToolError(`${tool}: ${error.message}`);
    }
    throw error;
  }
}
