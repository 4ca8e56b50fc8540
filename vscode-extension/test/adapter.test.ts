/**
 * The extension's debugger against the REAL adapter: `ptdebug dap` started with the command
 * line the extension's DebugAdapterDescriptorFactory builds (src/adapterCommand.ts), driven
 * through @vscode/debugadapter-testsupport's DebugClient, in front of real debugpy and a real
 * Python fixture. Data breakpoints, record breakpoints and step back run when the adapter
 * advertises them (supportsDataBreakpoints, breakpointModes "record", supportsStepBack);
 * otherwise they skip and say that the adapter did not advertise the capability.
 */
import { after, before, describe, test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as cp from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { DebugClient } from '@vscode/debugadapter-testsupport';
import { DebugProtocol } from '@vscode/debugprotocol';
import * as os from 'os';
import { CommandLine, adapterCommand } from '../src/adapterCommand';
import { CaptureEventBody, describeCapture } from '../src/captureModel';
import { applyEnvFile } from '../src/debuggee';
import { FIXTURES, PYTHON, ROOT, markerLine } from './helpers';

const FIXTURE = path.join(FIXTURES, 'vscode_session.py');
const TIMEOUT = 60_000;

/** DebugClient spawns `runtime executable`; the adapter needs `python -m adapter.cli dap`. */
class PtdebugClient extends DebugClient {
    process: cp.ChildProcess | undefined;
    stderr = '';
    capabilities: DebugProtocol.Capabilities = {};
    private stopping = false;

    constructor(private readonly line: CommandLine) {
        super(line.command, '', 'ptdebug');
        this.defaultTimeout = TIMEOUT;
        this.on('capabilities', (event: DebugProtocol.CapabilitiesEvent) => {
            Object.assign(this.capabilities, event.body.capabilities);
        });
    }

    override start(): Promise<void> {
        this.process = cp.spawn(this.line.command, this.line.args, { cwd: ROOT, stdio: ['pipe', 'pipe', 'pipe'] });
        this.process.stderr!.on('data', (chunk: Buffer) => { this.stderr += chunk.toString(); });
        this.process.on('exit', (code, signal) => {
            if (!this.stopping) {  // not asked to stop: say why the adapter went away
                console.error(`ptdebug dap exited (${code ?? signal}); stderr:\n${this.stderr}`);
            }
        });
        this.connect(this.process.stdout!, this.process.stdin!);
        return Promise.resolve();
    }

    override async stop(): Promise<void> {
        const child = this.process;
        if (!child) { return; }
        this.stopping = true;
        const exited = new Promise<number | null>(resolve => {
            if (child.exitCode !== null) { resolve(child.exitCode); } else { child.once('exit', code => resolve(code)); }
        });
        await Promise.race([this.disconnectRequest({ terminateDebuggee: true }).catch(() => undefined),
            new Promise(resolve => setTimeout(resolve, 10_000))]);
        const code = await Promise.race([exited, new Promise<'timeout'>(resolve => setTimeout(() => resolve('timeout'), 15_000))]);
        if (code === 'timeout') {
            child.kill('SIGKILL');
            throw new Error(`the adapter did not exit after disconnect; stderr:\n${this.stderr}`);
        }
        this.process = undefined;
    }
}

function newClient(): PtdebugClient {
    const line = adapterCommand({ pythonPath: PYTHON, adapterPath: '', adapterLogFile: '', logLevel: 'INFO' }, [ROOT], () => false);
    return new PtdebugClient(line);
}

async function launchToMarker(client: PtdebugClient, marker: string, args: string[] = []): Promise<DebugProtocol.StackFrame> {
    const line = markerLine(FIXTURE, marker);
    await client.hitBreakpoint({ program: FIXTURE, args, backend: 'python', console: 'internalConsole' },
        { path: FIXTURE, line });
    const threads = await client.threadsRequest();
    const stack = await client.stackTraceRequest({ threadId: threads.body.threads[0].id });
    const frame = stack.body.stackFrames[0];
    assert.equal(frame.line, line);
    return frame;
}

describe('ptdebug adapter through the DAP test client', { timeout: 4 * TIMEOUT }, () => {
    let client: PtdebugClient;

    before(() => { client = newClient(); return client.start(); });
    after(() => client.stop());

    test('initialize answers with ptdebug capabilities', async () => {
        const response = await client.initializeRequest({ adapterID: 'ptdebug', clientID: 'vscode-tests',
            linesStartAt1: true, columnsStartAt1: true, pathFormat: 'path', supportsProgressReporting: true });
        assert.equal(response.body?.supportsConfigurationDoneRequest, true);
        assert.equal(response.body?.supportsReadMemoryRequest, true);
        // instruction steps are served (history, Delve): VS Code's Disassembly view needs this
        assert.equal(response.body?.supportsSteppingGranularity, true);
        Object.assign(client.capabilities, response.body);
    });
});

describe('a Python fixture stops at a breakpoint and runs to its end', { timeout: 4 * TIMEOUT }, () => {
    let client: PtdebugClient;

    before(() => { client = newClient(); return client.start(); });
    after(() => client.stop());

    test('launch, stop at the marker, read a local, continue to exit', async () => {
        const frame = await launchToMarker(client, 'before_write');
        assert.equal(frame.name, 'main');
        const scopes = await client.scopesRequest({ frameId: frame.id });
        const locals = scopes.body.scopes.find(s => s.name.toLowerCase().startsWith('local'))!;
        const variables = await client.variablesRequest({ variablesReference: locals.variablesReference });
        const total = variables.body.variables.find(v => v.name === 'total');
        assert.equal(total?.value, String(Array.from({ length: 64 }, (_, i) => i * 3 % 251).reduce((a, b) => a + b)));
        const threadId = (await client.threadsRequest()).body.threads[0].id;
        await Promise.all([
            client.continueRequest({ threadId }),
            client.assertOutput('stdout', 'total='),
            client.waitForEvent('terminated'),
        ]);
    });
});

describe('data breakpoint (when the adapter advertises supportsDataBreakpoints)', { timeout: 4 * TIMEOUT }, () => {
    let client: PtdebugClient;

    before(() => { client = newClient(); return client.start(); });
    after(() => client.stop());

    test('a write to the watched buffer stops the debuggee right after the writing line', async t => {
        const frame = await launchToMarker(client, 'before_write', ['spin']);
        if (!client.capabilities.supportsDataBreakpoints) {
            t.skip('the adapter did not advertise supportsDataBreakpoints in this session');
            return;
        }
        const scopes = await client.scopesRequest({ frameId: frame.id });
        const locals = scopes.body.scopes.find(s => s.name.toLowerCase().startsWith('local'))!;
        const info = await client.dataBreakpointInfoRequest({ name: 'buf', variablesReference: locals.variablesReference });
        assert.ok(info.body.dataId, `no dataId for buf: ${info.body.description}`);
        const set = await client.setDataBreakpointsRequest({ breakpoints: [{ dataId: info.body.dataId!, accessType: 'write' }] });
        assert.equal(set.body.breakpoints[0].verified, true);
        const threadId = (await client.threadsRequest()).body.threads[0].id;
        const [, stopped] = await Promise.all([client.continueRequest({ threadId }), client.waitForEvent('stopped')]);
        assert.equal(stopped.body.reason, 'data breakpoint');
        const stack = await client.stackTraceRequest({ threadId: stopped.body.threadId });
        // The watchpoint fires after the writing instruction: the stop is at the @write line or
        // in the loop just after it (the thread is stopped asynchronously).
        const [write, spin] = [markerLine(FIXTURE, 'write'), markerLine(FIXTURE, 'spin')];
        const top = stack.body.stackFrames.find(f => f.source?.path === FIXTURE);
        assert.ok(top && top.name === 'main' && top.line >= write && top.line <= spin,
            `stopped at ${JSON.stringify(stack.body.stackFrames.map(f => `${f.name}:${f.line}`))}, expected main:${write}..${spin}`);
        const evaluated = await client.evaluateRequest({ expression: 'buf[5]', frameId: top.id, context: 'repl' });
        assert.equal(evaluated.body.result, String(0xab));
    });
});

describe('record breakpoint, capture event and step back (when the adapter offers them)', { timeout: 4 * TIMEOUT }, () => {
    let client: PtdebugClient;

    before(() => { client = newClient(); return client.start(); });
    after(() => client.stop());

    test('a record breakpoint announces a capture; one step back then stops in the history', async t => {
        const init = await client.initializeRequest({ adapterID: 'ptdebug', clientID: 'vscode-tests',
            linesStartAt1: true, columnsStartAt1: true, pathFormat: 'path', supportsProgressReporting: true });
        const modes = (init.body?.breakpointModes ?? []).map(m => m.mode);
        if (!modes.includes('record')) {
            t.skip('the adapter did not advertise a "record" breakpoint mode');
            return;
        }
        const captured = new Promise<DebugProtocol.Event>((resolve, reject) => {
            const timer = setTimeout(() => reject(new Error(`no ptdebug/capture event within ${TIMEOUT} ms; ` +
                `adapter stderr:\n${client.stderr}`)), TIMEOUT);
            client.once('ptdebug/capture', event => { clearTimeout(timer); resolve(event); });
        });
        const [recordLine, stopLine] = [markerLine(FIXTURE, 'after_fill'), markerLine(FIXTURE, 'before_write')];
        const [, , stopped] = await Promise.all([
            client.waitForEvent('initialized').then(async () => {
                const set = await client.setBreakpointsRequest({ source: { path: FIXTURE }, breakpoints: [
                    { line: recordLine, mode: 'record', recordWindow: { instructions: 3000 } } as DebugProtocol.SourceBreakpoint,
                    { line: stopLine }] });
                assert.deepEqual(set.body.breakpoints.map(b => b.verified), [true, true]);
                return client.configurationDoneRequest();
            }),
            client.launchRequest({ program: FIXTURE, backend: 'python', console: 'internalConsole' } as DebugProtocol.LaunchRequestArguments),
            client.waitForEvent('stopped'),
        ]);
        assert.equal(stopped.body.reason, 'breakpoint');
        // The extension's Trace Captures view is fed by this event: it must name a real bundle.
        const capture = (await captured).body as CaptureEventBody;
        assert.ok(fs.existsSync(path.join(capture.bundle, 'manifest.json')), `no bundle at ${capture.bundle}`);
        assert.ok((capture.instructions ?? 0) > 0);
        // the clock the view labels its numbers by (issue 35): the manifest's backend says which
        const manifest = JSON.parse(fs.readFileSync(path.join(capture.bundle, 'manifest.json'), 'utf8'));
        assert.equal(capture.clock, manifest.backend === 'stepper' ? 'stepper' : 'tsc');
        assert.ok(capture.clockLabel, 'the event has no clockLabel');
        if (capture.clock === 'stepper') {
            assert.doesNotMatch(describeCapture({ ...capture, key: 'k', origin: 's', serial: 1 }), /cycles/);
        }
        if (!client.capabilities.supportsStepBack) {
            t.skip('a capture was announced but the adapter did not advertise supportsStepBack');
            return;
        }
        const threadId = stopped.body.threadId;
        const [, back] = await Promise.all([client.stepBackRequest({ threadId }), client.waitForEvent('stopped')]);
        assert.equal(back.body.reason, 'step');
        const stack = await client.stackTraceRequest({ threadId: back.body.threadId });
        assert.ok(stack.body.stackFrames.length > 0, 'a stop in the history has a frame');
    });
});

describe('envFile: the extension reads it, the program sees its variables', { timeout: 4 * TIMEOUT }, () => {
    let client: PtdebugClient;
    let dir: string;

    before(() => {
        dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ptdebug-envfile-'));
        client = newClient();
        return client.start();
    });
    after(async () => {
        await client.stop();
        fs.rmSync(dir, { recursive: true, force: true });
    });

    test('a variable of the file and one of env, env winning over the file', async () => {
        const program = path.join(dir, 'show_env.py');
        fs.writeFileSync(program, 'import os\nprint("seen:", os.environ.get("GREETING"), os.environ.get("BOTH"), flush=True)\n');
        const envFile = path.join(dir, 'dev.env');
        fs.writeFileSync(envFile, '# from the file\nGREETING="hello from envFile"\nBOTH=file\n');
        // What the configuration provider does after VS Code substitutes the variables.
        const resolved = applyEnvFile({ type: 'ptdebug', request: 'launch', name: 'envFile', backend: 'python',
            program, console: 'internalConsole', envFile, env: { BOTH: 'env' } }, file => fs.readFileSync(file, 'utf8'));
        assert.ok(resolved.ok);
        assert.equal(resolved.configuration.envFile, undefined);
        await Promise.all([
            client.waitForEvent('initialized').then(() => client.configurationDoneRequest()),
            client.launch(resolved.configuration as DebugProtocol.LaunchRequestArguments),
            client.assertOutput('stdout', 'seen: hello from envFile env'),
            client.waitForEvent('terminated'),
        ]);
    });
});
