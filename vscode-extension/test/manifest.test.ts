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
const compiled = fs.readFileSync(path.join(EXTENSION, 'out', 'src', 'extension.js'), 'utf8');

test('main points at the compiled extension', () => {
    assert.ok(fs.existsSync(path.join(EXTENSION, pkg.main)), pkg.main);
});

test('every contributed command is registered and every menu names a contributed command', () => {
    const declared = new Set<string>(pkg.contributes.commands.map((c: { command: string }) => c.command));
    const registered = new Set([...compiled.matchAll(/registerCommand\('([^']+)'/g)].map(m => m[1]));
    assert.deepEqual([...declared].sort(), [...registered].sort());
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
    for (const m of compiled.matchAll(/registerTreeDataProvider\('([^']+)'/g)) {
        assert.ok(views.has(m[1]), `code registers unknown view ${m[1]}`);
    }
});

test('breakpoints are enabled for Python and Go files', () => {
    assert.deepEqual(pkg.contributes.breakpoints.map((b: { language: string }) => b.language).sort(), ['go', 'python']);
    assert.deepEqual([...debuggerContribution.languages].sort(), ['go', 'python']);
});

function checkAgainstSchema(config: Record<string, unknown>, where: string): void {
    const request = config.request as 'launch' | 'attach';
    const schema = debuggerContribution.configurationAttributes[request];
    assert.ok(schema, `${where}: request ${request}`);
    for (const [key, value] of Object.entries(config)) {
        if (['type', 'request', 'name'].includes(key)) { continue; }
        const property = schema.properties[key];
        assert.ok(property, `${where}: "${key}" is not in the ${request} schema`);
        if (property.enum) {
            assert.ok(property.enum.includes(value), `${where}: ${key}=${JSON.stringify(value)} not in ${property.enum}`);
        }
    }
    for (const key of schema.required ?? []) {
        assert.ok(key in config, `${where}: required "${key}" missing`);
    }
}

test('initial configurations and snippets use only attributes of the schema', () => {
    assert.ok(debuggerContribution.initialConfigurations.length >= 2);
    for (const config of debuggerContribution.initialConfigurations) {
        checkAgainstSchema(config, `initial "${config.name}"`);
    }
    const snippets = debuggerContribution.configurationSnippets;
    type Snippet = { body: { backend: string; request: string; replay?: string } };
    const backends = new Set(snippets.filter((s: Snippet) => s.body.replay === undefined)
        .map((s: Snippet) => `${s.body.backend}/${s.body.request}`));
    assert.deepEqual([...backends].sort(), ['go/attach', 'go/launch', 'python/attach', 'python/launch']);
    assert.ok(snippets.some((s: Snippet) => s.body.request === 'launch' && s.body.replay),
        'a snippet replays a trace bundle');
    for (const snippet of snippets) {
        checkAgainstSchema(snippet.body, `snippet "${snippet.label}"`);
    }
});
