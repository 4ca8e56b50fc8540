/**
 * The process picker of attach configurations, against REAL processes started here: a Python
 * interpreter and a Go program built here. `${command:pickProcess}` in a ptdebug configuration
 * resolves through the debugger's `variables` to `ptdebug.pickProcess`, whose handler (in the
 * bundled extension, the quick pick choosing the started process) returns that pid, which the
 * configuration provider turns into the integer the adapter wants.
 */
import { after, before, describe, test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as cp from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { resolveSubstituted } from '../src/configuration';
import { describeProcess, elfSectionNames, listProcesses, processItems, wantedKind } from '../src/processes';
import { activateBundle } from './bundleHost';
import { EXTENSION, PYTHON } from './helpers';

const pkg = JSON.parse(fs.readFileSync(path.join(EXTENSION, 'package.json'), 'utf8'));
const debuggerContribution = pkg.contributes.debuggers.find((d: { type: string }) => d.type === 'ptdebug');
const MARKER = `ptdebug-picker-${process.pid}`;

function goCommand(): string {
    for (const dir of [...(process.env.PATH ?? '').split(path.delimiter), '/usr/local/go/bin']) {
        if (dir && fs.existsSync(path.join(dir, 'go'))) { return path.join(dir, 'go'); }
    }
    throw new Error('go is not installed (PATH, /usr/local/go/bin): the picker test builds a Go program');
}

async function startedAndExecing(child: cp.ChildProcess, expect: string): Promise<void> {
    // The pid exists from spawn; wait until it runs the new executable (exec done).
    for (let i = 0; i < 200; i++) {
        try {
            if (fs.readFileSync(`/proc/${child.pid}/cmdline`, 'latin1').includes(expect)) { return; }
        } catch { /* not yet */ }
        await new Promise(resolve => setTimeout(resolve, 25));
    }
    throw new Error(`process ${child.pid} never ran ${expect}`);
}

describe('ptdebug.pickProcess lists running Python and Go processes', { timeout: 180_000 }, () => {
    let dir: string;
    let python: cp.ChildProcess;
    let go: cp.ChildProcess;
    let goBinary: string;

    before(async () => {
        dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ptdebug-picker-'));
        fs.writeFileSync(path.join(dir, 'main.go'), 'package main\n\nimport "time"\n\nfunc main() { time.Sleep(3 * time.Minute) }\n');
        fs.writeFileSync(path.join(dir, 'go.mod'), 'module sleeper\n\ngo 1.21\n');
        goBinary = path.join(dir, 'sleeper');
        cp.execFileSync(goCommand(), ['build', '-o', goBinary, '.'], { cwd: dir, stdio: 'pipe', timeout: 150_000 });
        python = cp.spawn(PYTHON, ['-c', 'import time; time.sleep(180)', MARKER], { stdio: 'ignore' });
        go = cp.spawn(goBinary, [MARKER], { stdio: 'ignore' });
        await startedAndExecing(python, MARKER);
        await startedAndExecing(go, MARKER);
    });

    after(() => {
        for (const child of [python, go]) { child?.kill('SIGKILL'); }
        fs.rmSync(dir, { recursive: true, force: true });
    });

    test('the listing finds each by kind, with its command line', () => {
        const pythons = listProcesses('python');
        const gos = listProcesses('go');
        const py = pythons.find(p => p.pid === python.pid);
        const g = gos.find(p => p.pid === go.pid);
        assert.ok(py, `python pid ${python.pid} not listed`);
        assert.ok(g, `go pid ${go.pid} not listed`);
        assert.match(py.commandLine, new RegExp(`-c import time; time.sleep\\(180\\) ${MARKER}$`));
        assert.match(py.name, /^python/);
        assert.equal(g.commandLine, `${goBinary} ${MARKER}`);
        assert.equal(g.name, 'sleeper');
        assert.ok(!pythons.some(p => p.pid === go.pid) && !gos.some(p => p.pid === python.pid), 'kinds kept apart');
        const all = listProcesses();
        assert.ok(all.some(p => p.pid === python.pid) && all.some(p => p.pid === go.pid));
        // This very node process is neither.
        assert.equal(describeProcess(process.pid), undefined);
        assert.ok(elfSectionNames(goBinary).includes('.gopclntab'));
        assert.deepEqual(elfSectionNames(path.join(dir, 'main.go')), []);
        const item = processItems([g])[0];
        assert.deepEqual(item, { label: `sleeper (${go.pid})`, description: 'Go', detail: `${goBinary} ${MARKER}`, pid: go.pid });
    });

    for (const backend of ['python', 'go'] as const) {
        test(`\${command:pickProcess} of a ${backend} attach resolves to the picked pid`, async () => {
            const snippet = debuggerContribution.configurationSnippets.find(
                (s: { body: { request: string; backend?: string } }) => s.body.request === 'attach' && s.body.backend === backend
                    && JSON.stringify(s.body).includes('pickProcess'));
            assert.ok(snippet, `an attach snippet for ${backend} with a picker`);
            const variable = /\$\{command:([\w.]+)\}/.exec(JSON.stringify(snippet.body))![1];
            const commandOf = (name: string) => debuggerContribution.variables?.[name] ?? name;
            // Both the snippet's own variable and the generic one resolve to our command.
            assert.equal(commandOf(variable), 'ptdebug.pickProcess');
            assert.equal(commandOf('pickProcess'), 'ptdebug.pickProcess');
            const wanted = backend === 'python' ? python.pid! : go.pid!;
            let offered: Array<{ pid: number; description: string }> = [];
            const activated = activateBundle({
                'vscode.window.showQuickPick': (items: unknown) => {
                    offered = items as typeof offered;
                    return Promise.resolve(offered.find(i => i.pid === wanted));
                },
            });
            const config = { type: 'ptdebug', request: 'attach', name: 'attach', backend, pid: '${command:pickProcess}' };
            const substituted = await activated.commands.get(commandOf('pickProcess'))!(config);
            assert.equal(substituted, String(wanted));
            assert.ok(offered.every(i => i.description === (backend === 'go' ? 'Go' : 'Python')), 'only the backend\'s kind offered');
            const resolved = resolveSubstituted({ ...config, pid: substituted });
            assert.ok(resolved.ok && resolved.configuration.pid === wanted);
        });
    }

    test('a cancelled pick resolves to nothing (VS Code then starts no session)', async () => {
        const activated = activateBundle({ 'vscode.window.showQuickPick': () => Promise.resolve(undefined) });
        assert.equal(await activated.commands.get('ptdebug.pickProcess')!({ backend: 'go' }), undefined);
        assert.equal(wantedKind({ backend: 'python' }), 'python');
        assert.equal(wantedKind({}), undefined);
    });
});
