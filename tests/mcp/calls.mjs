// calls.mjs: the official MCP TypeScript SDK's Client, over its StdioClientTransport, as the
// client of `kennel mcp`: what an agent framework does. The test gives the steps as JSON on
// stdin; each step's report is one JSON line on stdout, in order.
//
//   node calls.mjs KENNEL STATE_DIR SESSION [kennel mcp's options…] < steps.json
//
// A step is {"call": TOOL, "arguments": {…}, "timeout_ms": N}, {"list": true} or
// {"ping": true}. A tool result is reported with its content made small: an image or a
// resource blob as its mimeType, its decoded length and first bytes (hex), not its base64.
// A protocol error (the SDK throws an McpError) is reported as {"error": {code, message}}.
// The first line says who answered initialize; the last, {"stderr": …}, what kennel mcp
// logged.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const STEP_TIMEOUT_MS = 30000; // the SDK's own request timeout, per call
const [kennel, stateDir, session, ...extra] = process.argv.slice(2);

function small(block) {
    const data = block.data ?? block.resource?.blob;
    if (data === undefined)
        return block;
    const bytes = Buffer.from(data, 'base64');
    const { data: _d, ...rest } = block;
    const out = { ...rest, bytes: bytes.length, head: bytes.subarray(0, 8).toString('hex') };
    if (block.resource) {
        const { blob: _b, ...res } = block.resource;
        out.resource = res;
    }
    return out;
}

async function readStdin() {
    const chunks = [];
    for await (const chunk of process.stdin)
        chunks.push(chunk);
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

function say(obj) {
    process.stdout.write(JSON.stringify(obj) + '\n');
}

const steps = await readStdin();
const transport = new StdioClientTransport({
    command: kennel,
    args: ['--state-dir', stateDir, 'mcp', '--session', session, ...extra],
    stderr: 'pipe',
});
let stderr = '';
transport.stderr?.on('data', (chunk) => { stderr += chunk.toString(); });
const client = new Client({ name: 'kennel-tests', version: '1.0.0' });
try {
    await client.connect(transport, { timeout: STEP_TIMEOUT_MS });
    say({ server: client.getServerVersion(), capabilities: client.getServerCapabilities(),
          instructions: client.getInstructions() });
    for (const [i, step] of steps.entries()) {
        const options = { timeout: step.timeout_ms ?? STEP_TIMEOUT_MS };
        const t0 = performance.now();
        try {
            if (step.list) {
                const { tools } = await client.listTools({}, options);
                say({ step: i, tools });
            } else if (step.ping) {
                say({ step: i, ping: await client.ping(options) });
            } else {
                const r = await client.callTool({ name: step.call, arguments: step.arguments },
                                                undefined, options);
                say({ step: i, ms: performance.now() - t0, isError: r.isError ?? false,
                      content: r.content.map(small), structuredContent: r.structuredContent });
            }
        } catch (e) {
            say({ step: i, ms: performance.now() - t0,
                  error: { code: e.code ?? null, message: String(e.message ?? e) } });
        }
    }
} catch (e) {
    say({ fatal: String(e.stack ?? e) });
    process.exitCode = 1;
} finally {
    await client.close(); // closes kennel mcp's stdin, then SIGTERM and SIGKILL if need be
    say({ stderr });
}
