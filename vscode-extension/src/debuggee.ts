/**
 * What the extension settles about the debuggee before the adapter sees a configuration: the
 * variables of `envFile`, and the Python interpreter that runs the program.
 *
 * Role: the rules behind resolveDebugConfigurationWithSubstitutedVariables (extension.ts wires
 * them to VS Code and to the Python extension). Layer: extension, no `vscode` import, so
 * node:test checks them directly.
 *
 * envFile: read here, as ms-python's and vscode-go's extensions do (neither debugpy nor Delve
 * reads it): its variables go into `env`, where the configuration's own `env` wins; the
 * `envFile` key is then dropped. A file that cannot be read stops the launch with its name.
 *
 * Interpreter of a Python launch: the configuration's `python`; else the interpreter selected
 * in the Python extension (ms-python.python's API) for the workspace folder; else the
 * workspace's `.venv`; else none is set and debugpy runs the program with the adapter's own
 * interpreter. The adapter itself runs wherever ptdebug is installed (adapterCommand.ts), which
 * need not be the program's interpreter.
 */
import * as path from 'path';
import type { RawConfiguration, Resolution } from './configuration';

/** KEY=VALUE lines as python-dotenv and ms-python read them: `#` comments, blank lines,
 * an optional `export `, single quotes kept literally, double quotes with \n \t \" \\, and
 * `${NAME}` replaced by an earlier variable of the file or of `base`. */
export function parseEnvFile(text: string, base: Record<string, string | undefined> = {}): Record<string, string> {
    const vars: Record<string, string> = {};
    const lines = text.replace(/\r\n?/g, '\n').split('\n');
    lines.forEach((raw, index) => {
        const line = raw.trim();
        if (!line || line.startsWith('#')) { return; }
        const match = /^(?:export\s+)?([A-Za-z_][A-Za-z0-9_.]*)\s*=\s*(.*)$/.exec(line);
        if (!match) {
            throw new Error(`line ${index + 1} is not NAME=VALUE: ${JSON.stringify(raw.trim())}`);
        }
        const [, name, rest] = match;
        let value: string;
        if (rest.startsWith("'")) {
            const end = rest.indexOf("'", 1);
            if (end < 0) { throw new Error(`line ${index + 1}: unterminated ' quote`); }
            value = rest.slice(1, end);
        } else if (rest.startsWith('"')) {
            const end = closingQuote(rest);
            if (end < 0) { throw new Error(`line ${index + 1}: unterminated " quote`); }
            value = expand(rest.slice(1, end).replace(/\\([nt"\\])/g,
                (_, c: string) => ({ n: '\n', t: '\t', '"': '"', '\\': '\\' } as Record<string, string>)[c]), vars, base);
        } else {
            value = expand(rest.replace(/\s+#.*$/, '').trim(), vars, base);
        }
        vars[name] = value;
    });
    return vars;
}

function closingQuote(text: string): number {
    for (let i = 1; i < text.length; i++) {
        if (text[i] === '\\') { i++; continue; }
        if (text[i] === '"') { return i; }
    }
    return -1;
}

function expand(value: string, vars: Record<string, string>, base: Record<string, string | undefined>): string {
    return value.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (_, name: string) => vars[name] ?? base[name] ?? '');
}

/** The configuration with `envFile`'s variables merged under its `env`, and no `envFile`. */
export function applyEnvFile(config: RawConfiguration, readFile: (file: string) => string,
    base: Record<string, string | undefined> = process.env): Resolution {
    if (config.envFile === undefined || config.envFile === null || config.envFile === '') {
        const { envFile: _dropped, ...rest } = config;
        return { ok: true, configuration: rest };
    }
    if (typeof config.envFile !== 'string') {
        return { ok: false, message: `ptdebug: "envFile" must be a path, got ${JSON.stringify(config.envFile)}.` };
    }
    const file = config.envFile;
    let fromFile: Record<string, string>;
    try {
        fromFile = parseEnvFile(readFile(file), base);
    } catch (error) {
        const reason = (error as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file'
            : (error as Error).message;
        return { ok: false, message: `ptdebug: envFile ${file}: ${reason}.` };
    }
    const { envFile: _dropped, ...rest } = config;
    const own = (config.env && typeof config.env === 'object') ? config.env as Record<string, string | null> : {};
    return { ok: true, configuration: { ...rest, env: { ...fromFile, ...own } } };
}

/** Whether a configuration runs a Python program (so its interpreter is ours to choose). */
export function isPythonLaunch(config: RawConfiguration): boolean {
    if (config.request !== 'launch' || config.replay !== undefined) { return false; }
    if (config.backend !== undefined) { return config.backend === 'python'; }
    if (typeof config.module === 'string') { return true; }
    return typeof config.program === 'string' && /\.pyw?$/.test(config.program);
}

/** Where the interpreter came from, for the output channel. */
export type InterpreterSource = 'launch.json' | 'Python extension' | 'workspace .venv' | 'adapter';

export interface InterpreterChoice {
    /** The `python` to send, or undefined: debugpy uses the adapter's interpreter. */
    python?: string | string[];
    source: InterpreterSource;
}

/** The debuggee's interpreter of a Python launch (see the file's header for the order). */
export function chooseInterpreter(config: RawConfiguration, fromPythonExtension: string | string[] | undefined,
    workspaceFolder: string | undefined, exists: (file: string) => boolean): InterpreterChoice {
    const own = config.python;
    if ((typeof own === 'string' && own.trim()) || (Array.isArray(own) && own.length > 0)) {
        return { python: own as string | string[], source: 'launch.json' };
    }
    if (fromPythonExtension && fromPythonExtension.length > 0) {
        return { python: fromPythonExtension, source: 'Python extension' };
    }
    if (workspaceFolder) {
        const venv = path.join(workspaceFolder, '.venv', 'bin', 'python');
        if (exists(venv)) {
            return { python: venv, source: 'workspace .venv' };
        }
    }
    return { source: 'adapter' };
}

/** The parts of ms-python.python's exported API read here (both its current `environments`
 * API and the older `settings.getExecutionDetails`). */
export interface PythonExtensionApi {
    environments?: {
        getActiveEnvironmentPath(resource?: unknown): { id?: string; path: string } | undefined;
        resolveEnvironment(environment: { id?: string; path: string } | string):
            Promise<{ executable?: { uri?: { fsPath: string } } } | undefined>;
    };
    settings?: {
        getExecutionDetails(resource?: unknown): { execCommand?: string[] | undefined };
    };
}

/** The active interpreter's executable for `resource` per the Python extension, if it says. */
export async function interpreterFromPythonExtension(api: PythonExtensionApi | undefined,
    resource: unknown): Promise<string | string[] | undefined> {
    if (!api) { return undefined; }
    if (api.environments) {
        const active = api.environments.getActiveEnvironmentPath(resource);
        if (active?.path) {
            const resolved = await api.environments.resolveEnvironment(active);
            return resolved?.executable?.uri?.fsPath ?? active.path;
        }
    }
    const command = api.settings?.getExecutionDetails(resource)?.execCommand;
    // e.g. ['/env/bin/python'], or ['conda', 'run', '-n', 'env', 'python']: debugpy takes both
    if (!command || command.length === 0 || !command[0]) { return undefined; }
    return command.length === 1 ? command[0] : [...command];
}
