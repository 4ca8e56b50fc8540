/**
 * Every command something in the extension can run is registered by the bundled extension's
 * `activate`: those package.json contributes (commands, menus, the debugger's `variables`), those
 * the code runs (`executeCommand`) or puts on tree items, and the command of the language
 * server's hot-line lenses (adapter/lsp/server.py's SHOW_LINE_COMMAND). VS Code's own commands
 * (and `<view>.focus` of a contributed view) are the only ones not ours to register.
 */
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { activateBundle } from './bundleHost';
import { EXTENSION, ROOT } from './helpers';

const pkg = JSON.parse(fs.readFileSync(path.join(EXTENSION, 'package.json'), 'utf8'));
const sources = fs.readdirSync(path.join(EXTENSION, 'src')).filter(f => f.endsWith('.ts'))
    .map(f => fs.readFileSync(path.join(EXTENSION, 'src', f), 'utf8')).join('\n');
/** Commands of VS Code itself that the code runs. */
const BUILT_IN = new Set(['vscode.open', 'revealFileInOS', 'workbench.action.openSettings']);

function viewIds(): Set<string> {
    return new Set(Object.values(pkg.contributes.views as Record<string, Array<{ id: string }>>).flat().map(v => v.id));
}

/** Where each command is named, outside its registration. */
function namedCommands(): Map<string, string> {
    const named = new Map<string, string>();
    for (const c of pkg.contributes.commands) { named.set(c.command, 'contributes.commands'); }
    for (const [menu, items] of Object.entries(pkg.contributes.menus as Record<string, Array<{ command: string }>>)) {
        for (const item of items) { named.set(item.command, `menus.${menu}`); }
    }
    for (const debuggerContribution of pkg.contributes.debuggers) {
        for (const [variable, command] of Object.entries(debuggerContribution.variables ?? {})) {
            named.set(command as string, `debuggers.variables.${variable}`);
        }
        const text = JSON.stringify(debuggerContribution);
        for (const m of text.matchAll(/\$\{command:([\w.]+)\}/g)) {
            const command = debuggerContribution.variables?.[m[1]] ?? m[1];
            named.set(command, `a launch configuration's \${command:${m[1]}}`);
        }
    }
    for (const m of sources.matchAll(/executeCommand\(\s*'([^']+)'/g)) { named.set(m[1], 'executeCommand in src/'); }
    // A tree item's or lens's command: an id with a dot (a CommandLine's 'command:' is a file).
    for (const m of sources.matchAll(/command:\s*'(\w+\.[\w.]+)'/g)) { named.set(m[1], 'a tree item or lens in src/'); }
    const server = fs.readFileSync(path.join(ROOT, 'adapter', 'lsp', 'server.py'), 'utf8');
    const lens = /^SHOW_LINE_COMMAND = "([^"]+)"/m.exec(server);
    assert.ok(lens, 'adapter/lsp/server.py defines SHOW_LINE_COMMAND (the lenses\' command)');
    named.set(lens[1], 'the hot-line lenses of ptdebug lsp');
    return named;
}

test('every command a contribution, the code, a view or a lens names is registered by activate', () => {
    const activated = activateBundle();
    const views = viewIds();
    const missing: string[] = [];
    for (const [command, where] of namedCommands()) {
        if (BUILT_IN.has(command)) { continue; }
        const focus = /^(.+)\.focus$/.exec(command);
        if (focus && views.has(focus[1])) { continue; }
        if (!activated.commands.has(command)) { missing.push(`${command} (${where})`); }
    }
    assert.deepEqual(missing, [], 'named but never registered');
    assert.ok(activated.commands.has('ptdebug.showLine'));
    assert.ok(activated.commands.has('ptdebug.pickProcess'));
});

test('every registered command is contributed, and every registered view exists', () => {
    const activated = activateBundle();
    const declared = new Set<string>(pkg.contributes.commands.map((c: { command: string }) => c.command));
    assert.deepEqual([...activated.commands.keys()].filter(c => !declared.has(c)), []);
    const views = viewIds();
    assert.deepEqual(activated.views.filter(v => !views.has(v)), []);
    assert.deepEqual([...activated.views].sort(), ['ptdebug.captures', 'ptdebug.traceScope']);
});

test('the lens command opens the line and reports the exact numbers', async () => {
    const shown: string[] = [];
    const opened: string[] = [];
    const activated = activateBundle({
        'vscode.window.showInformationMessage': (text: unknown) => { shown.push(String(text)); return Promise.resolve(undefined); },
        'vscode.window.showErrorMessage': (text: unknown) => { shown.push(`error: ${String(text)}`); return Promise.resolve(undefined); },
        'vscode.window.showTextDocument': (uri: unknown) => {
            opened.push(typeof uri);
            return Promise.resolve({ selection: undefined, revealRange() { /* shown */ } });
        },
    });
    await activated.commands.get('ptdebug.showLine')!({ file: '/ws/svc.py', line: 12, executions: 1234,
        instructions: 56789, cycles: 1_000_000, share: 0.0712, clock: 'tsc', bundle: '/ws/.ptdebug/captures/c1' });
    assert.equal(opened.length, 1);
    assert.deepEqual(shown, ['ptdebug: svc.py:12 ran 1,234× — 56,789 instructions, 1,000,000 cycles, ' +
        '7.12% of the window (capture /ws/.ptdebug/captures/c1)']);
    await activated.commands.get('ptdebug.showLine')!(undefined);
    assert.match(shown[1], /^error: ptdebug: hot line: the lens has no \{file, line\} argument/);
});

/** A kept capture's bundle folder, as the adapter writes it (a manifest and a stream). */
function keptBundle(): string {
    const bundle = fs.mkdtempSync(path.join(os.tmpdir(), 'ptdebug-capture-'));
    fs.writeFileSync(path.join(bundle, 'manifest.json'), '{"version": 1}');
    fs.writeFileSync(path.join(bundle, 'stream-0.pt'), Buffer.alloc(16));
    return bundle;
}

test('Delete Capture removes the bundle folder once the user confirms, and nothing else', async () => {
    const shown: string[] = [];
    let answer: string | undefined = undefined;
    const activated = activateBundle({
        'vscode.window.showWarningMessage': (text: unknown) => { shown.push(String(text)); return Promise.resolve(answer); },
        'vscode.window.showErrorMessage': (text: unknown) => { shown.push(`error: ${String(text)}`); return Promise.resolve(undefined); },
    });
    const remove = activated.commands.get('ptdebug.deleteCapture')!;
    const bundle = keptBundle();
    const capture = { bundle, key: `session#1#${bundle}`, origin: 'session', serial: 1 };
    await remove(capture);  // the user cancels the confirmation
    assert.ok(fs.existsSync(bundle), 'deleted without the user\'s yes');
    assert.match(shown[0], /^Delete the capture .*removed from disk/);
    answer = 'Delete';
    await remove(capture);
    assert.ok(!fs.existsSync(bundle), 'the bundle folder is still there');
    const notABundle = fs.mkdtempSync(path.join(os.tmpdir(), 'ptdebug-not-a-bundle-'));
    try {
        await remove({ ...capture, bundle: notABundle });
        assert.ok(fs.existsSync(notABundle), 'a folder without manifest.json was deleted');
        assert.match(shown[shown.length - 1], /^error: ptdebug: deleting the capture failed: .* is not a trace bundle/);
    } finally {
        fs.rmSync(notABundle, { recursive: true, force: true });
    }
});

test('Replay Capture starts a replay launch of the bundle, and Reveal shows the folder', async () => {
    const launched: Array<Record<string, unknown>> = [];
    const ran: unknown[][] = [];
    const activated = activateBundle({
        'vscode.debug.startDebugging': (_folder: unknown, config: unknown) => {
            launched.push(config as Record<string, unknown>);
            return Promise.resolve(true);
        },
        'vscode.commands.executeCommand': (...args: unknown[]) => { ran.push(args); return Promise.resolve(undefined); },
    });
    const bundle = keptBundle();
    try {
        const capture = { bundle, key: `session#1#${bundle}`, origin: 'session', serial: 1, id: 1 };
        await activated.commands.get('ptdebug.replayCapture')!(capture);
        assert.equal(launched.length, 1);
        assert.equal(launched[0].type, 'ptdebug');
        assert.equal(launched[0].request, 'launch');
        assert.equal(launched[0].replay, bundle);
        await activated.commands.get('ptdebug.revealCapture')!(capture);
        assert.equal(ran.length, 1);
        assert.equal(ran[0][0], 'revealFileInOS');
    } finally {
        fs.rmSync(bundle, { recursive: true, force: true });
    }
});
