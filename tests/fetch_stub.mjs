// The daemon as the plugin drivers (plugin_driver.mjs, plugin_v2_driver.mjs) stand it in:
// globalThis.fetch answers with `replies`, in order (the last one repeats), each
// {status, body, headers?} or {error: "ConnectionRefused"}, and records every request in
// `requests` as {url, method, body, unix, headers (lower-case names), at}.
export function stubFetch(replies, requests) {
  let next = 0;
  globalThis.fetch = async (url, init = {}) => {
    requests.push({
      url: String(url),
      method: init.method ?? "GET",
      body: init.body ? JSON.parse(init.body) : null,
      unix: init.unix ?? null,
      headers: Object.fromEntries(new Headers(init.headers ?? {})),
      at: Date.now(),
    });
    const reply = replies[Math.min(next, replies.length - 1)];
    next += 1;
    if (reply.error) {
      const error = new Error("Unable to connect. Is the computer able to access the url?");
      error.code = reply.error;
      throw error;
    }
    const body = typeof reply.body === "string" ? reply.body : JSON.stringify(reply.body);
    return new Response(body, { status: reply.status, headers: reply.headers ?? {} });
  };
}

// The driver's environment: `env` set before the plugin loads (null unsets a variable).
export function applyEnv(env) {
  for (const [key, value] of Object.entries(env ?? {})) {
    if (value === null) delete process.env[key];
    else process.env[key] = value;
  }
}
