/**
 * Launch/attach configurations of the `ptdebug` debugger type, as pure functions.
 *
 * Role: the logic behind the DebugConfigurationProvider (extension.ts wires it to VS Code).
 * Layer: extension, no `vscode` import, so node:test checks it directly. It knows the shape
 * of the configurations (src/schema.ts, generated from the adapter's schema.py) and nothing
 * of how the adapter runs them: the adapter validates again and names the wrong field.
 */
import * as path from 'path';
import type { AttachConfig, LaunchConfig } from './schema';

export const DEBUG_TYPE = 'ptdebug';

/** A configuration as VS Code hands it over: anything may be missing. */
export interface RawConfiguration {
    type?: string;
    request?: string;
    name?: string;
    [key: string]: unknown;
}

/** What the editor shows when F5 is pressed without a launch.json. */
export interface EditorContext {
    /** Path of the active editor's file, if any. */
    activeFile?: string;
    /** Its language id ('python', 'go', ...). */
    languageId?: string;
    /** The workspace folder the configuration belongs to. */
    workspaceFolder?: string;
}

export type Resolution =
    | { ok: true; configuration: RawConfiguration }
    | { ok: false; message: string };

/** The configurations offered when launch.json is created (and as dynamic ones). */
export function initialConfigurations(context: EditorContext): RawConfiguration[] {
    const configs: RawConfiguration[] = [];
    if (context.languageId === 'go') {
        configs.push(goLaunch(context));
        configs.push(pythonLaunch());
    } else {
        configs.push(pythonLaunch());
        configs.push(goLaunch(context));
    }
    return configs;
}

function pythonLaunch(): RawConfiguration {
    const config: LaunchConfig & RawConfiguration = {
        type: DEBUG_TYPE, request: 'launch', name: 'ptdebug: Python file',
        backend: 'python', program: '${file}', cwd: '${workspaceFolder}',
    };
    return config;
}

function goLaunch(context: EditorContext): RawConfiguration {
    const program = context.languageId === 'go' && context.activeFile
        ? path.dirname(context.activeFile) : '${workspaceFolder}';
    const config: LaunchConfig & RawConfiguration = {
        type: DEBUG_TYPE, request: 'launch', name: 'ptdebug: Go package',
        backend: 'go', program, cwd: '${workspaceFolder}',
    };
    return config;
}

/**
 * resolveDebugConfiguration: fill in what F5 without launch.json means, or refuse with a
 * message that says what to do. Runs before VS Code substitutes `${...}` variables.
 */
export function resolveConfiguration(config: RawConfiguration, context: EditorContext): Resolution {
    if (!config.type && !config.request && !config.name) {
        // F5 with no launch.json: debug the active file, if it is one ptdebug can run.
        if (context.languageId === 'python' && context.activeFile) {
            return { ok: true, configuration: {
                type: DEBUG_TYPE, request: 'launch', name: 'ptdebug: current file',
                backend: 'python', program: context.activeFile,
                cwd: context.workspaceFolder ?? path.dirname(context.activeFile),
            } };
        }
        if (context.languageId === 'go' && context.activeFile) {
            return { ok: true, configuration: {
                type: DEBUG_TYPE, request: 'launch', name: 'ptdebug: current package',
                backend: 'go', program: path.dirname(context.activeFile),
                cwd: context.workspaceFolder ?? path.dirname(context.activeFile),
            } };
        }
        return { ok: false, message: 'ptdebug: open a Python or Go file to debug, or add a ' +
            'ptdebug configuration to launch.json.' };
    }
    const resolved: RawConfiguration = { ...config, type: config.type ?? DEBUG_TYPE };
    resolved.request = config.request ?? 'launch';
    if (resolved.request !== 'launch' && resolved.request !== 'attach') {
        return { ok: false, message: `ptdebug: "request" must be "launch" or "attach", ` +
            `not ${JSON.stringify(resolved.request)}.` };
    }
    resolved.name = config.name ?? `ptdebug: ${resolved.request}`;
    // a replay launch ({"replay": BUNDLE}, the Replay Capture command's) runs no program
    if (resolved.request === 'launch' && resolved.program === undefined &&
        resolved.module === undefined && resolved.replay === undefined) {
        return { ok: false, message: 'ptdebug: a launch configuration needs "program" (or ' +
            '"module" for Python, or "replay" for a trace bundle).' };
    }
    if (resolved.request === 'attach' && resolved.pid === undefined &&
        resolved.processId === undefined && resolved.connect === undefined) {
        return { ok: false, message: 'ptdebug: an attach configuration needs "pid" (e.g. ' +
            '"${command:pickProcess}") or "connect" {host, port} of a debugpy server.' };
    }
    return { ok: true, configuration: resolved };
}

/**
 * After substitution: the message for a launch whose `program` (or `replay` bundle) does not
 * exist, or undefined. Without it the adapter starts, debugpy runs the interpreter on a missing
 * file and the session ends with a line in the Debug Console. A relative path is taken from
 * `cwd` (itself from the workspace folder), as the adapter and the interpreter take it. A Go
 * `program` is checked when it is a path ('/', '.', '~'), not an import path.
 */
export function missingProgram(config: RawConfiguration, workspaceFolder: string | undefined,
    exists: (file: string) => boolean): string | undefined {
    if (config.request !== 'launch') { return undefined; }
    const base = typeof config.cwd === 'string' && config.cwd
        ? path.resolve(workspaceFolder ?? process.cwd(), config.cwd) : workspaceFolder ?? process.cwd();
    const check = (key: 'program' | 'replay', what: string): string | undefined => {
        const value = config[key];
        if (typeof value !== 'string' || !value) { return undefined; }
        const full = path.resolve(base, value.startsWith('~/') && process.env.HOME
            ? path.join(process.env.HOME, value.slice(2)) : value);
        return exists(full) ? undefined
            : `ptdebug: the ${what} ${full} does not exist ("${key}": ${JSON.stringify(value)} in ` +
              `the configuration "${config.name ?? ''}"${path.isAbsolute(value) ? '' : `, relative to ${base}`}).`;
    };
    if (config.replay !== undefined) {
        return check('replay', 'trace bundle');
    }
    const program = config.program;
    const python = config.backend === 'python' ||
        (config.backend === undefined && typeof program === 'string' && /\.pyw?$/.test(program));
    if (python || (typeof program === 'string' && /^(\/|\.|~\/)/.test(program))) {
        return check('program', 'program');
    }
    return undefined;
}

/**
 * resolveDebugConfigurationWithSubstitutedVariables: `${command:pickProcess}` becomes a
 * string of digits; the adapter's schema wants an integer process id.
 */
export function resolveSubstituted(config: RawConfiguration): Resolution {
    const resolved: RawConfiguration = { ...config };
    for (const key of ['pid', 'processId'] as const) {
        const value = resolved[key];
        if (typeof value === 'string') {
            if (!/^\d+$/.test(value.trim())) {
                return { ok: false, message: `ptdebug: "${key}" must be a process id, ` +
                    `got ${JSON.stringify(value)}.` };
            }
            resolved[key] = Number(value.trim());
        }
    }
    const connect = resolved.connect as AttachConfig['connect'] | undefined;
    if (connect && typeof connect === 'object' && typeof (connect as { port: unknown }).port === 'string') {
        const port = String((connect as { port: unknown }).port).trim();
        if (!/^\d+$/.test(port)) {
            return { ok: false, message: `ptdebug: "connect.port" must be a port number, got ${JSON.stringify(port)}.` };
        }
        resolved.connect = { ...connect, port: Number(port) };
    }
    return { ok: true, configuration: resolved };
}
