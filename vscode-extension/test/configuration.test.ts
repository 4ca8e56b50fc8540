/** The DebugConfigurationProvider's logic (src/configuration.ts), as pure functions. */
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { initialConfigurations, missingProgram, resolveConfiguration, resolveSubstituted } from '../src/configuration';

test('F5 without launch.json on a Python file launches that file with the python backend', () => {
    const r = resolveConfiguration({}, { activeFile: '/ws/app/main.py', languageId: 'python', workspaceFolder: '/ws' });
    assert.ok(r.ok);
    assert.deepEqual(r.configuration, {
        type: 'ptdebug', request: 'launch', name: 'ptdebug: current file',
        backend: 'python', program: '/ws/app/main.py', cwd: '/ws',
    });
});

test('F5 without launch.json on a Go file launches its package with the go backend', () => {
    const r = resolveConfiguration({}, { activeFile: '/ws/cmd/svc/main.go', languageId: 'go' });
    assert.ok(r.ok);
    assert.equal(r.configuration.backend, 'go');
    assert.equal(r.configuration.program, '/ws/cmd/svc');
    assert.equal(r.configuration.cwd, '/ws/cmd/svc');
});

test('F5 without launch.json on another language refuses with a message', () => {
    const r = resolveConfiguration({}, { activeFile: '/ws/README.md', languageId: 'markdown' });
    assert.equal(r.ok, false);
    assert.match(!r.ok ? r.message : '', /open a Python or Go file/);
});

test('a launch without program or module is refused before the adapter starts', () => {
    const r = resolveConfiguration({ type: 'ptdebug', request: 'launch', name: 'x', args: [] }, {});
    assert.equal(r.ok, false);
    assert.match(!r.ok ? r.message : '', /"program" \(or\s+"module"/);
});

test('an attach needs a pid or connect', () => {
    assert.equal(resolveConfiguration({ type: 'ptdebug', request: 'attach', name: 'a' }, {}).ok, false);
    const r = resolveConfiguration({ type: 'ptdebug', request: 'attach', name: 'a', pid: '${command:pickProcess}' }, {});
    assert.ok(r.ok);
    assert.equal(r.configuration.pid, '${command:pickProcess}', 'variables are left to VS Code');
});

test('an unknown request kind is refused, a missing name is filled in', () => {
    assert.equal(resolveConfiguration({ type: 'ptdebug', request: 'run', name: 'x', program: 'p' }, {}).ok, false);
    const r = resolveConfiguration({ type: 'ptdebug', request: 'launch', program: 'p.py' }, {});
    assert.ok(r.ok);
    assert.equal(r.configuration.name, 'ptdebug: launch');
});

test('unknown keys are kept (the adapter forwards them to debugpy or Delve)', () => {
    const r = resolveConfiguration({ type: 'ptdebug', request: 'launch', name: 'x', program: 'p.py', console: 'integratedTerminal' }, {});
    assert.ok(r.ok);
    assert.equal(r.configuration.console, 'integratedTerminal');
});

test('the picked process id (a string after substitution) becomes the integer the schema wants', () => {
    const r = resolveSubstituted({ type: 'ptdebug', request: 'attach', name: 'a', pid: '4242' });
    assert.ok(r.ok);
    assert.equal(r.configuration.pid, 4242);
    const bad = resolveSubstituted({ type: 'ptdebug', request: 'attach', name: 'a', processId: 'abc' });
    assert.equal(bad.ok, false);
    assert.match(!bad.ok ? bad.message : '', /"processId" must be a process id/);
    const port = resolveSubstituted({ type: 'ptdebug', request: 'attach', name: 'a', connect: { host: 'h', port: '5678' } });
    assert.ok(port.ok);
    assert.deepEqual(port.configuration.connect, { host: 'h', port: 5678 });
});

test('initial configurations offer Python and Go, the active language first', () => {
    const py = initialConfigurations({ languageId: 'python' });
    assert.deepEqual(py.map(c => c.backend), ['python', 'go']);
    const go = initialConfigurations({ languageId: 'go', activeFile: '/ws/x/main.go' });
    assert.deepEqual(go.map(c => c.backend), ['go', 'python']);
    assert.equal(go[0].program, '/ws/x');
    for (const c of [...py, ...go]) {
        assert.equal(c.type, 'ptdebug');
        assert.equal(c.request, 'launch');
        assert.ok(resolveConfiguration(c, {}).ok, `${c.name} resolves`);
    }
});

test('a replay launch needs no program (the Replay Capture command\'s configuration)', () => {
    const r = resolveConfiguration({ type: 'ptdebug', request: 'launch', name: 'Replay capture 1', replay: '/ws/.ptdebug/captures/c1' }, {});
    assert.ok(r.ok, r.ok ? '' : r.message);
    assert.equal(r.configuration.replay, '/ws/.ptdebug/captures/c1');
    const none = resolveConfiguration({ type: 'ptdebug', request: 'launch', name: 'x' }, {});
    assert.ok(!none.ok && /needs "program"/.test(none.message));
});

test('a missing program or bundle is named, relative paths from cwd; a Go import path is not checked', () => {
    const present = new Set(['/ws/app.py', '/ws/svc', '/ws/sub/tool.py', '/b/c1']);
    const exists = (f: string) => present.has(f);
    const launch = { type: 'ptdebug', request: 'launch', name: 'n' };
    assert.equal(missingProgram({ ...launch, program: '/ws/app.py' }, '/ws', exists), undefined);
    assert.equal(missingProgram({ ...launch, program: 'app.py' }, '/ws', exists), undefined);
    assert.equal(missingProgram({ ...launch, program: 'tool.py', cwd: 'sub' }, '/ws', exists), undefined);
    assert.equal(missingProgram({ ...launch, program: 'nope.py' }, '/ws', exists),
        'ptdebug: the program /ws/nope.py does not exist ("program": "nope.py" in the configuration "n", relative to /ws).');
    assert.match(missingProgram({ ...launch, backend: 'go', program: './cmd' }, '/ws', exists) ?? '', /the program \/ws\/cmd does not exist/);
    assert.equal(missingProgram({ ...launch, backend: 'go', program: './svc' }, '/ws', exists), undefined);
    assert.equal(missingProgram({ ...launch, backend: 'go', program: 'example.com/svc' }, '/ws', exists), undefined);
    assert.equal(missingProgram({ ...launch, module: 'http.server', backend: 'python' }, '/ws', exists), undefined);
    assert.equal(missingProgram({ ...launch, replay: '/b/c1' }, '/ws', exists), undefined);
    assert.match(missingProgram({ ...launch, replay: '/b/gone' }, '/ws', exists) ?? '', /the trace bundle \/b\/gone does not exist/);
    assert.equal(missingProgram({ type: 'ptdebug', request: 'attach', pid: 1 }, '/ws', exists), undefined);
});
