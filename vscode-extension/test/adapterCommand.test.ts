/** How the adapter and the language server are started (src/adapterCommand.ts). */
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { PtdebugSettings, SAFE_START, adapterCommand, ptdebugCommand, pythonInterpreter } from '../src/adapterCommand';

const DEFAULTS: PtdebugSettings = { pythonPath: '', adapterPath: '', adapterLogFile: '', logLevel: 'INFO' };
const nothing = () => false;

test('the configured interpreter runs `ptdebug dap` without the workspace on sys.path', () => {
    const line = adapterCommand({ ...DEFAULTS, pythonPath: '/opt/py/bin/python' }, ['/ws'], nothing);
    assert.deepEqual(line, { command: '/opt/py/bin/python', args: ['-c', SAFE_START, 'dap'] });
});

test('without a setting, the workspace .venv wins over python3', () => {
    assert.equal(pythonInterpreter(DEFAULTS, ['/a', '/b'], f => f === '/b/.venv/bin/python'), '/b/.venv/bin/python');
    assert.equal(pythonInterpreter(DEFAULTS, ['/a'], nothing), 'python3');
});

test('the ptdebug console script, when set, is run directly', () => {
    const line = adapterCommand({ ...DEFAULTS, adapterPath: '/usr/local/bin/ptdebug', pythonPath: '/x' }, [], nothing);
    assert.deepEqual(line, { command: '/usr/local/bin/ptdebug', args: ['dap'] });
});

test('log settings become adapter options; the language server is `lsp`', () => {
    const line = adapterCommand({ ...DEFAULTS, adapterLogFile: '/tmp/a.log', logLevel: 'DEBUG' }, [], nothing);
    assert.deepEqual(line.args, ['-c', SAFE_START, 'dap', '--log-file', '/tmp/a.log', '--log-level', 'DEBUG']);
    assert.deepEqual(ptdebugCommand(['lsp'], DEFAULTS, [], nothing).args, ['-c', SAFE_START, 'lsp']);
});

test('~/ in a path setting is the home directory', () => {
    const home = process.env.HOME ?? '/root';
    assert.equal(pythonInterpreter({ ...DEFAULTS, pythonPath: '~/venv/bin/python' }, [], nothing), `${home}/venv/bin/python`);
});
