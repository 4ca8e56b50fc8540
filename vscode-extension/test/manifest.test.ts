/**
 * package.json is what VS Code reads: every command it names must be registered by the code,
 * every view a menu names must exist, and the configurations it offers must fit its schema.
 */
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'fs';
import * as path from 'path';
import { EXTENSION } from './helpers';

const pkg = JSON.parse(fs.readFileSync(path.join(EXTENSION, 'package.json'), 'utf8'));
const debuggerContribution = pkg.contributes.debuggers.find((d: { type: string }) => d.type === 'ptdebug');

test('main points at the bundle that vscode:prepublish builds', () => {
    assert.equal(pkg.main, './dist/extension.js');
    assert.match(pkg.scripts['vscode:prepublish'], /\bnpm run bundle\b/);
    assert.equal(pkg.scripts.bundle, 'node scripts/bundle.js');
    assert.equal(pkg.devDependencies.esbuild, '0.28.2');
    const notices = fs.readFileSync(path.join(EXTENSION, 'dist', 'ThirdPartyNotices.txt'), 'utf8');
    assert.match(notices, /^vscode-languageclient 9\.0\.1 \(MIT\)$/m, 'the bundled client\'s licence ships');
    assert.ok(fs.existsSync(path.join(EXTENSION, pkg.main)), `${pkg.main} (npm run compile bundles it)`);
});

test('engines.vscode is the first version with breakpoint modes, @types/vscode the same', () => {
    // Record breakpoints are a DAP breakpoint mode: VS Code shows modes since 1.87 (Feb 2024,
    // microsoft/vscode#205251); the API used (debug configuration providers with trigger kinds,
    // tree views, vscode-languageclient 9 which needs ^1.82) is older.
    assert.equal(pkg.engines.vscode, '^1.87.0');
    assert.equal(pkg.devDependencies['@types/vscode'], '1.87.0');
    assert.ok(pkg.dependencies['vscode-languageclient'].startsWith('9.'));
});

test('every menu names a contributed command', () => {
    const declared = new Set<string>(pkg.contributes.commands.map((c: { command: string }) => c.command));
    for (const [menu, items] of Object.entries(pkg.contributes.menus as Record<string, Array<{ command: string }>>)) {
        for (const item of items) {
            assert.ok(declared.has(item.command), `${menu} names unknown command ${item.command}`);
        }
    }
    for (const title of ['Capture Trace Now', 'Show Captures', 'Export to pprof', 'Export to Perfetto', 'Show Goroutine History']) {
        assert.ok(pkg.contributes.commands.some((c: { title: string }) => c.title === title), title);
    }
});

test('views named by menus and by the code exist', () => {
    const views = new Set<string>(Object.values(pkg.contributes.views as Record<string, Array<{ id: string }>>)
        .flat().map(v => v.id));
    for (const m of JSON.stringify(pkg.contributes.menus).matchAll(/view == ([\w.]+)/g)) {
        assert.ok(views.has(m[1]), `menu names unknown view ${m[1]}`);
    }
});

test('breakpoints are enabled for Python and Go files', () => {
    assert.deepEqual(pkg.contributes.breakpoints.map((b: { language: string }) => b.language).sort(), ['go', 'python']);
    assert.deepEqual([...debuggerContribution.languages].sort(), ['go', 'python']);
});

/** Keys VS Code itself gives every launch configuration (its debug schema's common part). */
const COMMON_KEYS = new Set(['type', 'request', 'name', 'preLaunchTask', 'postDebugTask', 'presentation',
    'internalConsoleOptions', 'debugServer', 'suppressMultipleSessionWarning']);

type Schema = { type?: string | string[]; enum?: unknown[]; pattern?: string; properties?: Record<string, Schema>;
    additionalProperties?: Schema | boolean; items?: Schema; required?: string[] };

function jsonType(value: unknown): string {
    if (value === null) { return 'null'; }
    if (Array.isArray(value)) { return 'array'; }
    return typeof value === 'number' ? (Number.isInteger(value) ? 'integer' : 'number') : typeof value;
}

/** The JSON-schema subset the contributed configurationAttributes use, as VS Code applies it
 * to launch.json: a key an object schema does not name is "not allowed". */
function validate(value: unknown, schema: Schema, where: string, errors: string[]): void {
    const actual = jsonType(value);
    if (schema.type) {
        const types = Array.isArray(schema.type) ? schema.type : [schema.type];
        if (!types.includes(actual) && !(actual === 'integer' && types.includes('number'))) {
            errors.push(`${where}: ${JSON.stringify(value)} is not ${types.join(' or ')}`);
            return;
        }
    }
    if (schema.enum && !schema.enum.includes(value)) {
        errors.push(`${where}: ${JSON.stringify(value)} is not one of ${JSON.stringify(schema.enum)}`);
    }
    if (schema.pattern && typeof value === 'string' && !new RegExp(schema.pattern).test(value)) {
        errors.push(`${where}: ${JSON.stringify(value)} does not match ${schema.pattern}`);
    }
    if (actual === 'array' && schema.items) {
        (value as unknown[]).forEach((item, i) => validate(item, schema.items!, `${where}[${i}]`, errors));
    }
    if (actual === 'object') {
        const object = value as Record<string, unknown>;
        for (const key of schema.required ?? []) {
            if (!(key in object)) { errors.push(`${where}: "${key}" is required`); }
        }
        for (const [key, item] of Object.entries(object)) {
            const property = schema.properties?.[key];
            if (property) {
                validate(item, property, `${where}.${key}`, errors);
            } else if (typeof schema.additionalProperties === 'object') {
                validate(item, schema.additionalProperties, `${where}.${key}`, errors);
            } else if (schema.properties && !(where.split('.').length === 1 && COMMON_KEYS.has(key))) {
                errors.push(`${where}: property "${key}" is not allowed`);
            }
        }
    }
}

function configurationErrors(config: Record<string, unknown>, where: string): string[] {
    const request = config.request as 'launch' | 'attach';
    const schema = debuggerContribution.configurationAttributes[request] as Schema | undefined;
    if (!schema) { return [`${where}: request ${JSON.stringify(request)} has no schema`]; }
    const errors: string[] = [];
    validate(config, schema, where, errors);
    return errors;
}

/** A snippet body as the inserted launch.json holds it: placeholders take their defaults, and
 * a "^..." string is the JSON text after the caret (`"^\"\\${file}\""` is the string "${file}"). */
function expandSnippet(value: unknown): unknown {
    if (typeof value === 'string') {
        const text = value.replace(/\\\$/g, '\u0000').replace(/\$\{\d+:([^}]*)\}/g, '$1')
            // eslint-disable-next-line no-control-regex -- NUL stands in for an escaped $
            .replace(/\$\d+/g, '').replace(/\u0000/g, '$');
        return text.startsWith('^') ? JSON.parse(text.slice(1)) : text;
    }
    if (Array.isArray(value)) { return value.map(expandSnippet); }
    if (value && typeof value === 'object') {
        return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, expandSnippet(v)]));
    }
    return value;
}

test('initial configurations and snippets validate against the contributed schema', () => {
    assert.ok(debuggerContribution.initialConfigurations.length >= 2);
    const errors: string[] = [];
    for (const config of debuggerContribution.initialConfigurations) {
        errors.push(...configurationErrors(config, `initial "${config.name}"`));
    }
    const snippets = debuggerContribution.configurationSnippets;
    type Snippet = { label: string; body: { backend: string; request: string; replay?: string } };
    const backends = new Set(snippets.filter((s: Snippet) => s.body.replay === undefined)
        .map((s: Snippet) => `${s.body.backend}/${s.body.request}`));
    assert.deepEqual([...backends].sort(), ['go/attach', 'go/launch', 'python/attach', 'python/launch']);
    assert.ok(snippets.some((s: Snippet) => s.body.request === 'launch' && s.body.replay),
        'a snippet replays a trace bundle');
    for (const snippet of snippets as Snippet[]) {
        const body = expandSnippet(snippet.body) as Record<string, unknown>;
        errors.push(...configurationErrors(body, `snippet "${snippet.label}"`));
        if (body.request === 'attach' && body.pid !== undefined) {
            assert.equal(body.pid, '${command:ptdebug.pickProcess}', `${snippet.label} picks its process`);
        }
    }
    assert.deepEqual(errors, []);
});

test('what debugpy and Delve accept through ptdebug validates (docs/vscode.md)', () => {
    const python = { type: 'ptdebug', request: 'launch', name: 'py', backend: 'python', program: '${file}',
        args: ['--fast'], python: '${workspaceFolder}/.venv/bin/python', pythonArgs: ['-X', 'dev'],
        console: 'integratedTerminal', envFile: '${workspaceFolder}/.env', env: { A: '1', B: null },
        justMyCode: false, subProcess: true, django: true, flask: false, jinja: true, showReturnValue: true,
        redirectOutput: true, stopOnEntry: false, cwd: '${workspaceFolder}', preLaunchTask: 'build' };
    const go = { type: 'ptdebug', request: 'launch', name: 'go', backend: 'go', program: '${workspaceFolder}/cmd/svc',
        mode: 'debug', buildFlags: '-tags=integration', args: [], substitutePath: [{ from: '/ws', to: '/build' }],
        showGlobalVariables: true, showRegisters: false, hideSystemGoroutines: true, stackTraceDepth: 80,
        recordWindow: { instructions: 100000 } };
    const attach = { type: 'ptdebug', request: 'attach', name: 'a', backend: 'python', pid: '${command:pickProcess}',
        pathMappings: [{ localRoot: '${workspaceFolder}', remoteRoot: '/app' }], justMyCode: true, subProcess: false };
    const connect = { type: 'ptdebug', request: 'attach', name: 'c', connect: { host: 'localhost', port: 5678 } };
    for (const config of [python, go, attach, connect]) {
        assert.deepEqual(configurationErrors(config, config.name), []);
    }
});

test('the validation rejects what VS Code would flag', () => {
    const base = { type: 'ptdebug', request: 'launch', name: 'x', program: 'a.py' };
    assert.deepEqual(configurationErrors({ ...base, consol: 'integratedTerminal' }, 'x'), ['x: property "consol" is not allowed']);
    assert.deepEqual(configurationErrors({ ...base, console: 'terminal' }, 'x'),
        ['x.console: "terminal" is not one of ["internalConsole","integratedTerminal","externalTerminal"]']);
    assert.deepEqual(configurationErrors({ ...base, args: 'a b' }, 'x'), ['x.args: "a b" is not array']);
    assert.deepEqual(configurationErrors({ ...base, request: 'attach', pid: 'abc' }, 'x'),
        ['x: property "program" is not allowed', 'x.pid: "abc" does not match ^\\$\\{command:[A-Za-z0-9_.]+\\}$']);
    assert.deepEqual(configurationErrors({ ...base, substitutePath: [{ from: '/a' }] }, 'x'), ['x.substitutePath[0]: "to" is required']);
    assert.equal(expandSnippet('^"\\${workspaceFolder}${1:/cmd/service}"'), '${workspaceFolder}/cmd/service');
    assert.equal(expandSnippet('^${2:5678}'), 5678);
});
