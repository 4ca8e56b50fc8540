/**
 * Loads the BUNDLED extension (dist/extension.js, what the .vsix ships) with a stand-in for the
 * `vscode` module and runs its `activate`, so tests see what the real code registers.
 *
 * A stand-in, not VS Code (which cannot run on these machines): every name @types/vscode
 * exports exists, and any call on it returns another stand-in; `commands.registerCommand`
 * records its command and handler, the debug configuration providers and adapter tracker
 * factories are kept; `overrides` replaces chosen functions (e.g. the quick pick) or values.
 * It proves what activate registers and what a handler returns, not how VS Code shows it.
 */
import * as fs from 'fs';
import * as path from 'path';
import { EXTENSION } from './helpers';

// eslint-disable-next-line @typescript-eslint/no-require-imports
const Module = require('module') as { _load: (request: string, ...rest: unknown[]) => unknown };

export interface Activated {
    /** Command id -> handler, in registration order. */
    commands: Map<string, (...args: unknown[]) => unknown>;
    /** Tree views registered (their ids). */
    views: string[];
    /** Debug configuration providers registered (the objects, in order). */
    configurationProviders: Array<Record<string, (...args: unknown[]) => unknown>>;
    /** Debug adapter tracker factories registered. */
    trackerFactories: Array<{ createDebugAdapterTracker(session: unknown): Record<string, (...args: unknown[]) => unknown> }>;
}

/** Replacements by full name: a function, or a value (e.g. `vscode.workspace.workspaceFolders`). */
type Overrides = Record<string, unknown>;

function standIn(name: string, activated: Activated, overrides: Overrides): unknown {
    return new Proxy(function () { /* callable and constructible */ }, {
        get(_target, property) {
            if (property === 'then' || typeof property === 'symbol') { return undefined; }
            const full = `${name}.${String(property)}`;
            if (overrides[full]) { return overrides[full]; }
            if (full === 'vscode.commands.registerCommand') {
                return (id: string, handler: (...args: unknown[]) => unknown) => {
                    activated.commands.set(id, handler);
                    return { dispose() { activated.commands.delete(id); } };
                };
            }
            if (full === 'vscode.window.registerTreeDataProvider') {
                return (id: string) => { activated.views.push(id); return { dispose() { /* nothing */ } }; };
            }
            if (full === 'vscode.debug.registerDebugConfigurationProvider') {
                return (_type: string, provider: Record<string, (...args: unknown[]) => unknown>) => {
                    activated.configurationProviders.push(provider);
                    return { dispose() { /* nothing */ } };
                };
            }
            if (full === 'vscode.debug.registerDebugAdapterTrackerFactory') {
                return (_type: string, factory: Activated['trackerFactories'][number]) => {
                    activated.trackerFactories.push(factory);
                    return { dispose() { /* nothing */ } };
                };
            }
            return standIn(full, activated, overrides);
        },
        apply: () => standIn(`${name}()`, activated, overrides),
        construct: () => standIn(`new ${name}`, activated, overrides) as object,
    });
}

/** Requires dist/extension.js afresh with the stand-in and activates it. */
export function activateBundle(overrides: Overrides = {}): Activated {
    const bundle = path.join(EXTENSION, 'dist', 'extension.js');
    if (!fs.existsSync(bundle)) {
        throw new Error(`${bundle} is missing: run npm run compile (it bundles with esbuild)`);
    }
    const activated: Activated = { commands: new Map(), views: [], configurationProviders: [], trackerFactories: [] };
    const declarations = fs.readFileSync(path.join(EXTENSION, 'node_modules', '@types', 'vscode', 'index.d.ts'), 'utf8');
    const vscode: Record<string, unknown> = {};
    for (const match of declarations.matchAll(/^\s*export (?:namespace|class|enum|const|function|let) (\w+)/gm)) {
        vscode[match[1]] = standIn(`vscode.${match[1]}`, activated, overrides);
    }
    const load = Module._load;
    Module._load = function (request: string, ...rest: unknown[]) {
        return request === 'vscode' ? vscode : load.call(this, request, ...rest);
    };
    try {
        delete require.cache[bundle];
        // eslint-disable-next-line @typescript-eslint/no-require-imports
        const extension = require(bundle) as { activate(context: unknown): void };
        extension.activate({ subscriptions: [], extensionPath: EXTENSION });
    } finally {
        Module._load = load;
    }
    return activated;
}
