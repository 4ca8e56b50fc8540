/** envFile and the program's interpreter (src/debuggee.ts): the rules, on given inputs. The
 * Python extension's API is a stand-in object of the two shapes ms-python.python exports. */
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { PythonExtensionApi, applyEnvFile, chooseInterpreter, interpreterFromPythonExtension, isPythonLaunch, parseEnvFile } from '../src/debuggee';

test('an env file: comments, export, quotes, escapes and ${NAME} from the file or the base', () => {
    const text = [
        '# settings', '', 'export HOST=db.local', 'PORT = 5432 # trailing comment',
        "RAW='a ${HOST} \\n b'", 'QUOTED="line1\\nline2 \\"x\\""', 'URL=postgres://${HOST}:${PORT}/${USER}',
        'EMPTY=', 'HASH="a # not a comment"',
    ].join('\r\n');
    assert.deepEqual(parseEnvFile(text, { USER: 'ann' }), {
        HOST: 'db.local', PORT: '5432', RAW: 'a ${HOST} \\n b', QUOTED: 'line1\nline2 "x"',
        URL: 'postgres://db.local:5432/ann', EMPTY: '', HASH: 'a # not a comment',
    });
    assert.throws(() => parseEnvFile('A=1\nnot a line\n'), /^Error: line 2 is not NAME=VALUE: "not a line"$/);
    assert.throws(() => parseEnvFile('A="open'), /line 1: unterminated " quote/);
});

test('envFile goes into env, env wins, envFile is not passed on', () => {
    const files: Record<string, string> = { '/ws/.env': 'A=from-file\nB=from-file\n' };
    const read = (file: string) => {
        if (!(file in files)) { throw Object.assign(new Error(`ENOENT: ${file}`), { code: 'ENOENT' }); }
        return files[file];
    };
    const result = applyEnvFile({ request: 'launch', envFile: '/ws/.env', env: { B: 'own', C: null } }, read, {});
    assert.deepEqual(result, { ok: true, configuration: { request: 'launch', env: { A: 'from-file', B: 'own', C: null } } });
    assert.deepEqual(applyEnvFile({ request: 'launch', envFile: '/ws/missing.env' }, read, {}),
        { ok: false, message: 'ptdebug: envFile /ws/missing.env: no such file.' });
    assert.deepEqual(applyEnvFile({ request: 'launch', envFile: 3 }, read, {}),
        { ok: false, message: 'ptdebug: "envFile" must be a path, got 3.' });
    assert.deepEqual(applyEnvFile({ request: 'launch', env: { X: '1' } }, read, {}),
        { ok: true, configuration: { request: 'launch', env: { X: '1' } } });
});

test('which configurations run a Python program', () => {
    assert.ok(isPythonLaunch({ request: 'launch', backend: 'python', program: 'x' }));
    assert.ok(isPythonLaunch({ request: 'launch', program: '/ws/app.py' }));
    assert.ok(isPythonLaunch({ request: 'launch', module: 'pkg.main' }));
    assert.ok(!isPythonLaunch({ request: 'launch', backend: 'go', program: '/ws/app.py' }));
    assert.ok(!isPythonLaunch({ request: 'launch', program: '/ws/cmd/svc' }));
    assert.ok(!isPythonLaunch({ request: 'attach', backend: 'python', pid: 3 }));
    assert.ok(!isPythonLaunch({ request: 'launch', replay: '/b', backend: 'python' }));
});

test('the interpreter: launch.json, then the Python extension, then the workspace .venv, then the adapter\'s', () => {
    const venv = (f: string) => f === '/ws/.venv/bin/python';
    const launch = { request: 'launch', program: 'a.py' };
    assert.deepEqual(chooseInterpreter({ ...launch, python: '/own/python' }, '/ext/python', '/ws', venv),
        { python: '/own/python', source: 'launch.json' });
    assert.deepEqual(chooseInterpreter(launch, '/ext/python', '/ws', venv), { python: '/ext/python', source: 'Python extension' });
    assert.deepEqual(chooseInterpreter(launch, ['conda', 'run', '-n', 'e', 'python'], '/ws', venv),
        { python: ['conda', 'run', '-n', 'e', 'python'], source: 'Python extension' });
    assert.deepEqual(chooseInterpreter({ ...launch, python: '  ' }, undefined, '/ws', venv),
        { python: '/ws/.venv/bin/python', source: 'workspace .venv' });
    assert.deepEqual(chooseInterpreter(launch, undefined, '/ws', () => false), { source: 'adapter' });
    assert.deepEqual(chooseInterpreter(launch, undefined, undefined, venv), { source: 'adapter' });
});

test('the Python extension\'s active environment, through its current and its older API', async () => {
    const asked: unknown[] = [];
    const current: PythonExtensionApi = { environments: {
        getActiveEnvironmentPath: resource => { asked.push(resource); return { id: 'e1', path: '/envs/e1' }; },
        resolveEnvironment: async environment => {
            assert.deepEqual(environment, { id: 'e1', path: '/envs/e1' });
            return { executable: { uri: { fsPath: '/envs/e1/bin/python3.12' } } };
        },
    } };
    assert.equal(await interpreterFromPythonExtension(current, 'folder-uri'), '/envs/e1/bin/python3.12');
    assert.deepEqual(asked, ['folder-uri']);
    const unresolved: PythonExtensionApi = { environments: {
        getActiveEnvironmentPath: () => ({ path: '/usr/bin/python3' }), resolveEnvironment: async () => undefined } };
    assert.equal(await interpreterFromPythonExtension(unresolved, undefined), '/usr/bin/python3');
    const older: PythonExtensionApi = { settings: { getExecutionDetails: () => ({ execCommand: ['/old/bin/python'] }) } };
    assert.equal(await interpreterFromPythonExtension(older, undefined), '/old/bin/python');
    const conda: PythonExtensionApi = { settings: { getExecutionDetails: () => ({ execCommand: ['conda', 'run', 'python'] }) } };
    assert.deepEqual(await interpreterFromPythonExtension(conda, undefined), ['conda', 'run', 'python']);
    const none: PythonExtensionApi = { settings: { getExecutionDetails: () => ({ execCommand: undefined }) } };
    assert.equal(await interpreterFromPythonExtension(none, undefined), undefined);
    assert.equal(await interpreterFromPythonExtension(undefined, undefined), undefined);
});
