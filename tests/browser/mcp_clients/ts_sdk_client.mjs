// An MCP host built on the official TypeScript SDK (what Claude Code and Claude Desktop use),
// driven by tests/connector/oauth/test_node_clients.py against a real connector:
//
//   node ts_sdk_client.mjs <mcp-url>
//
// It signs in with OAuth as a desktop host does: registers, opens the authorization URL (here:
// prints {"event": "authorize", "url": ...} on stdout for the test to open in Chromium), takes
// the code on its own loopback callback server, and exchanges it. Then it uses tools, resources
// and prompts; then it spoils its access token so the next call gets a 401 and the SDK refreshes.
// Every outcome is one JSON line on stdout; any failure exits non-zero with {"event": "error"}.
import http from "node:http";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";

const say = (event) => process.stdout.write(JSON.stringify(event) + "\n");
const serverUrl = new URL(process.argv[2]);

// The host's redirect endpoint: one code, then the page a person sees.
let gotCode;
const codeArrived = new Promise((resolve) => { gotCode = resolve; });
const callback = http.createServer((request, response) => {
  const url = new URL(request.url, "http://127.0.0.1");
  if (url.pathname !== "/callback") { response.writeHead(404).end(); return; }
  gotCode(url.searchParams.get("code"));
  response.writeHead(200, { "content-type": "text/html" }).end("<!doctype html><title>Signed in</title><p>Signed in.</p>");
});
await new Promise((resolve) => callback.listen(0, "127.0.0.1", resolve));
const redirectUrl = `http://127.0.0.1:${callback.address().port}/callback`;

const store = { client: undefined, tokens: undefined, verifier: undefined, redirects: 0, saved: [] };
const provider = {
  get redirectUrl() { return redirectUrl; },
  get clientMetadata() {
    return {
      client_name: "TypeScript SDK host", redirect_uris: [redirectUrl], grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"], token_endpoint_auth_method: "none",
    };
  },
  clientInformation: () => store.client,
  saveClientInformation: (info) => { store.client = info; },
  tokens: () => store.tokens,
  saveTokens: (tokens) => { store.tokens = tokens; store.saved.push(tokens); },
  redirectToAuthorization: (url) => { store.redirects += 1; say({ event: "authorize", url: url.toString() }); },
  saveCodeVerifier: (verifier) => { store.verifier = verifier; },
  codeVerifier: () => store.verifier,
};

async function connected() {
  const client = new Client({ name: "ts-sdk-host", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(serverUrl, { authProvider: provider }));
  return client;
}

const text = (result) => result.content.filter((item) => item.type === "text").map((item) => item.text).join("\n");

try {
  // 1. Sign in: the first connection is refused and the SDK sends the person to the sign-in page.
  const transport = new StreamableHTTPClientTransport(serverUrl, { authProvider: provider });
  try {
    await new Client({ name: "ts-sdk-host", version: "1.0.0" }).connect(transport);
    throw new Error("connected without signing in");
  } catch (error) {
    if (!(error instanceof UnauthorizedError)) throw error;
  }
  await transport.finishAuth(await codeArrived);
  say({ event: "signed_in", scope: store.tokens.scope, has_refresh_token: Boolean(store.tokens.refresh_token) });

  // 2. Tools, resources, prompts.
  let client = await connected();
  const tools = (await client.listTools()).tools.map((tool) => tool.name);
  const saved = await client.callTool({ name: "brain_memorize", arguments: { content: process.argv[3], origin: "user" } });
  const recalled = await client.callTool({ name: "brain_recall", arguments: { query: process.argv[4] } });
  const searched = await client.callTool({ name: "search", arguments: { query: process.argv[4] } });
  const resources = (await client.listResources()).resources.map((resource) => resource.uri);
  const pinned = await client.readResource({ uri: "brain://pinned" });
  const memoryId = saved.structuredContent?.stored?.id;
  const memory = await client.readResource({ uri: `brain://memories/${memoryId}` });
  const prompts = (await client.listPrompts()).prompts.map((prompt) => prompt.name);
  const prompt = await client.getPrompt({ name: "session_start", arguments: { task: process.argv[4] } });
  await client.close();
  say({
    event: "used", tools, memorized: { error: Boolean(saved.isError), id: memoryId, synced: saved.structuredContent?.synced },
    recalled: (recalled.structuredContent?.results ?? []).map((hit) => hit.id), searched: JSON.parse(text(searched)),
    resources, pinned_mime: pinned.contents[0].mimeType, memory_text: memory.contents[0].text, prompts,
    prompt_text: prompt.messages[0].content.text,
  });

  // 3. Refresh: an access token the server refuses (401 invalid_token) makes the SDK use its refresh token.
  const before = store.tokens;
  store.tokens = { ...before, access_token: "bca1_spoiled" };
  client = await connected();
  const after = await client.callTool({ name: "brain_status", arguments: {} });
  await client.close();
  say({
    event: "refreshed", redirects: store.redirects, status_error: Boolean(after.isError),
    memory_count: after.structuredContent?.memory_count, new_access_token: store.tokens.access_token !== before.access_token
      && store.tokens.access_token !== "bca1_spoiled", rotated_refresh_token: store.tokens.refresh_token !== before.refresh_token,
  });
  say({ event: "done" });
  callback.close();
  process.exit(0);
} catch (error) {
  say({ event: "error", message: String(error?.stack ?? error) });
  callback.close();
  process.exit(1);
}
