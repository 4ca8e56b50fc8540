/**
 * Issue 35, "ptdebug in a real VS Code": with ptdebug not installed where the extension looks,
 * F5 did nothing visible (`python3 -c ... dap` died with "No module named 'adapter'", one line in
 * the output channel). Now the launch stops with a notification that names what is wrong and
 * how to fix it, whose button opens the setting; so does an adapter that dies before it answers;
 * a program that does not exist is named too.
 *
 * Through the bundled extension's configuration provider and adapter tracker (bundleHost's
 * stand-in for `vscode`), with real interpreters: the repository's, and one without ptdebug
 * (a virtual environment made here).
 */
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as cp from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { activateBundle } from './bundleHost';
import { FIXTURES, PYTHON, ROOT } from './helpers';

/** bin/ of a fresh virtual environment of the repository's Python, without ptdebug. */
const bareBin = (() => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ptdebug-no-ptdebug-'));
    cp.execFileSync(PYTHON, ['-m', 'venv', '--without-pip', dir]);
    process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
    return path.join(dir, 'bin');
})();
const BARE_PYTHON = path.join(bareBin, 'python');

interface Host {
    resolve(config: Record<string, unknown>): Promise<unknown>;
    tracker(): Record<string, (...args: unknown[]) => unknown>;
    /** Error notifications shown. */
    shown: string[];
    /** Commands run (the notification's button is clicked each time). */
    ran: unknown[][];
}

function host(values: Record<string, string>): Host {
    const shown: string[] = [];
    const ran: unknown[][] = [];
    const activated = activateBundle({
        'vscode.workspace.getConfiguration': () => ({ get: (key: string, fallback: unknown) => values[key] ?? fallback }),
        'vscode.workspace.workspaceFolders': [],
        'vscode.extensions.getExtension': () => undefined,
        'vscode.window.showErrorMessage': (text: unknown, ...items: unknown[]) => {
            shown.push(String(text));
            return Promise.resolve(items[0]);  // the user clicks the button, where there is one
        },
        'vscode.commands.executeCommand': (...args: unknown[]) => { ran.push(args); return Promise.resolve(undefined); },
    });
    const provider = activated.configurationProviders.find(p => p.resolveDebugConfigurationWithSubstitutedVariables)!;
    return {
        shown, ran,
        resolve: async config => {
            const result = await provider.resolveDebugConfigurationWithSubstitutedVariables(undefined, config);
            await new Promise(resolve => setImmediate(resolve));  // the button's command runs
            return result;
        },
        tracker: () => activated.trackerFactories[0].createDebugAdapterTracker({ name: 'probe', id: 's1', configuration: {} }),
    };
}

const LAUNCH = { type: 'ptdebug', request: 'launch', name: 'basic', backend: 'python',
    program: path.join(FIXTURES, 'dap_basic.py'), cwd: ROOT };

test('an interpreter without ptdebug: the launch stops with a notification naming it and the fix', async () => {
    const h = host({ pythonPath: BARE_PYTHON });
    assert.equal(await h.resolve({ ...LAUNCH }), undefined, 'the launch went on');
    assert.equal(h.shown.length, 1, 'no notification');
    assert.match(h.shown[0], new RegExp(`^ptdebug is not installed for ${BARE_PYTHON} \\(ptdebug.pythonPath is `));
    assert.match(h.shown[0], /pip install ptdebug, or set ptdebug\.adapterPath/);
    assert.deepEqual(h.ran, [['workbench.action.openSettings', 'ptdebug.pythonPath']]);
});

test('nothing configured and no ptdebug on PATH: python3 is tried, and the notification says so', async () => {
    // the case of the issue: the extension host's PATH has a python3 without ptdebug
    const saved = process.env.PATH;
    process.env.PATH = bareBin;
    try {
        const h = host({});
        assert.equal(await h.resolve({ ...LAUNCH }), undefined);
        assert.equal(h.shown.length, 1, 'no notification');
        assert.match(h.shown[0], /^ptdebug is not installed for python3 \(no ptdebug\.adapterPath, no workspace \.venv with ptdebug and no `ptdebug` on the PATH of VS Code, so python3 was tried\): python3 -m pip install ptdebug, or set ptdebug\.adapterPath/);
        assert.deepEqual(h.ran, [['workbench.action.openSettings', 'ptdebug.adapterPath']]);
    } finally {
        process.env.PATH = saved;
    }
});

test('ptdebug.adapterPath that does not exist is named', async () => {
    const h = host({ adapterPath: '/nonexistent/bin/ptdebug' });
    assert.equal(await h.resolve({ ...LAUNCH }), undefined);
    assert.match(h.shown[0], /^ptdebug cannot start: ptdebug\.adapterPath is "\/nonexistent\/bin\/ptdebug", which does not exist\. Pip install ptdebug/);
    assert.deepEqual(h.ran, [['workbench.action.openSettings', 'ptdebug.adapterPath']]);
});

test('an installed ptdebug: the launch goes on, without a notification', async () => {
    const h = host({ pythonPath: PYTHON });
    const resolved = await h.resolve({ ...LAUNCH }) as Record<string, unknown>;
    assert.equal(resolved?.program, LAUNCH.program);
    assert.deepEqual(h.shown, []);
});

test('a program that does not exist is named before anything starts', async () => {
    const h = host({ pythonPath: PYTHON });
    assert.equal(await h.resolve({ ...LAUNCH, program: 'nope/missing.py' }), undefined);
    assert.deepEqual(h.shown, [`ptdebug: the program ${path.join(ROOT, 'nope', 'missing.py')} does not exist ` +
        `("program": "nope/missing.py" in the configuration "basic", relative to ${ROOT}).`]);
});

test('an adapter that exits before it answers is reported as a failed start; one that answered, as a death mid-session', async () => {
    const bare = host({ pythonPath: BARE_PYTHON });
    await bare.tracker().onExit(1, undefined);
    assert.equal(bare.shown.length, 1, 'no notification');
    assert.match(bare.shown[0], /^ptdebug is not installed for /);
    // ptdebug starts, yet this adapter died at start: the log setting is offered
    const fine = host({ pythonPath: PYTHON });
    await fine.tracker().onExit(1, undefined);
    assert.match(fine.shown[0], /^ptdebug: the debug adapter of "probe" exited at start \(status 1\) before answering VS Code\. Set ptdebug\.adapterLogFile/);
    assert.deepEqual(fine.ran, [['workbench.action.openSettings', 'ptdebug.adapterLogFile']]);
    // one that answered, then was killed (VS Code 1.139 passes no status and no signal then)
    const answered = fine.tracker();
    answered.onDidSendMessage({ type: 'response', command: 'initialize' });
    await answered.onExit(undefined, undefined);
    assert.equal(fine.shown.length, 2, 'an adapter killed mid-session was not reported');
    assert.equal(fine.shown[1], 'ptdebug: the debug adapter of "probe" was killed in the middle of the session, so the ' +
        'session has ended. The program it launched ends with it. Set ptdebug.adapterLogFile to keep the adapter\'s log ' +
        '(attach it to a bug report). Press F5 to start it again.');
    // ended because VS Code asked (the Stop button: disconnect), whatever its status: nothing shown
    const stopped = fine.tracker();
    stopped.onDidSendMessage({ type: 'response', command: 'initialize' });
    stopped.onWillReceiveMessage({ type: 'request', command: 'disconnect', seq: 9 });
    assert.equal(await stopped.onExit(undefined, 'SIGTERM'), undefined);
    // ended by itself with status 0 (its program ended): nothing shown
    const done = fine.tracker();
    done.onDidSendMessage({ type: 'event', event: 'terminated' });
    assert.equal(await done.onExit(0, undefined), undefined);
    assert.equal(fine.shown.length, 2, 'an expected end was reported');
});
