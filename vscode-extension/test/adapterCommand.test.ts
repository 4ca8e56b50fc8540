/** How the adapter and the language server are started (src/adapterCommand.ts). */
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { PtdebugSettings, SAFE_START, adapterCommand, adapterDiedProblem, ptdebugCommand, pythonInterpreter, searchPath } from '../src/adapterCommand';

const DEFAULTS: PtdebugSettings = { pythonPath: '', adapterPath: '', adapterLogFile: '', logLevel: 'INFO' };
const nothing = () => false;

test('the configured interpreter runs `ptdebug dap` without the workspace on sys.path', () => {
    const line = adapterCommand({ ...DEFAULTS, pythonPath: '/opt/py/bin/python' }, ['/ws'], nothing);
    assert.deepEqual(line, { command: '/opt/py/bin/python', args: ['-c', SAFE_START, 'dap'] });
});

test('without a setting, the adapter runs where ptdebug is installed', () => {
    // a workspace .venv with ptdebug in it
    const venvWithPtdebug = (f: string) => f === '/b/.venv/bin/python' || f === '/b/.venv/bin/ptdebug';
    assert.equal(pythonInterpreter(DEFAULTS, ['/a', '/b'], venvWithPtdebug), '/b/.venv/bin/python');
    assert.deepEqual(adapterCommand(DEFAULTS, ['/a', '/b'], venvWithPtdebug, '/usr/bin').args, ['-c', SAFE_START, 'dap']);
    // a workspace .venv without ptdebug is the program's, not the adapter's: the console script on PATH
    const venvAndPipx = (f: string) => f === '/ws/.venv/bin/python' || f === '/home/u/.local/bin/ptdebug';
    assert.equal(pythonInterpreter(DEFAULTS, ['/ws'], venvAndPipx), undefined);
    assert.deepEqual(adapterCommand(DEFAULTS, ['/ws'], venvAndPipx, '/usr/bin:/home/u/.local/bin'),
        { command: '/home/u/.local/bin/ptdebug', args: ['dap'] });
    // nothing found: python3, still independent of the cwd
    assert.deepEqual(adapterCommand(DEFAULTS, ['/ws'], nothing, '/usr/bin'), { command: 'python3', args: ['-c', SAFE_START, 'dap'] });
});

test('PATH is searched in order, relative entries skipped', () => {
    const present = (f: string) => f === '/opt/bin/ptdebug' || f === '/usr/bin/ptdebug' || f === 'bin/ptdebug';
    assert.equal(searchPath('ptdebug', present, 'bin:/opt/bin:/usr/bin'), '/opt/bin/ptdebug');
    assert.equal(searchPath('ptdebug', nothing, '/opt/bin'), undefined);
    assert.equal(searchPath('ptdebug', present, ''), undefined);
});

test('the ptdebug console script, when set, is run directly', () => {
    const line = adapterCommand({ ...DEFAULTS, adapterPath: '/usr/local/bin/ptdebug', pythonPath: '/x' }, [], nothing);
    assert.deepEqual(line, { command: '/usr/local/bin/ptdebug', args: ['dap'] });
});

test('log settings become adapter options; the language server is `lsp`', () => {
    const line = adapterCommand({ ...DEFAULTS, adapterLogFile: '/tmp/a.log', logLevel: 'DEBUG' }, [], nothing, '');
    assert.deepEqual(line.args, ['-c', SAFE_START, 'dap', '--log-file', '/tmp/a.log', '--log-level', 'DEBUG']);
    assert.deepEqual(ptdebugCommand(['lsp'], DEFAULTS, [], nothing, '').args, ['-c', SAFE_START, 'lsp']);
});

test('~/ in a path setting is the home directory', () => {
    const home = process.env.HOME ?? '/root';
    assert.equal(pythonInterpreter({ ...DEFAULTS, pythonPath: '~/venv/bin/python' }, [], nothing), `${home}/venv/bin/python`);
});

test('adapterDiedProblem says how the adapter ended, what became of the program, and where its log is', () => {
    const launch = adapterDiedProblem({ name: 'app', configuration: { request: 'launch' } }, 3, undefined, '');
    assert.equal(launch.setting, 'ptdebug.adapterLogFile');
    assert.match(launch.message, /^ptdebug: the debug adapter of "app" exited with status 3 in the middle of the session, so the session has ended\. The program it launched ends with it\. Set ptdebug\.adapterLogFile/);
    const attach = adapterDiedProblem({ name: 'svc', configuration: { request: 'attach' } }, undefined, 'SIGKILL', '/tmp/a.log');
    assert.match(attach.message, /"svc" was killed \(SIGKILL\) .* The process it attached to is let go, not stopped by ptdebug\. The adapter's log: \/tmp\/a\.log\./);
    const replay = adapterDiedProblem({ name: 'r', configuration: { request: 'launch', replay: '/b' } }, undefined, undefined, '');
    assert.match(replay.message, /"r" was killed in the middle .* The replay has nothing running to end\./);
});
