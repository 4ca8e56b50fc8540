/**
 * How the extension starts ptdebug's processes: the DAP adapter and the language server.
 *
 * Role: turns the user's settings into a command line. Layer: extension, no `vscode` import
 * (extension.ts reads the settings and passes them here), so it is tested directly. The
 * adapter is `ptdebug dap` through the interpreter (see SAFE_START) or the `ptdebug` console
 * script; the language server is the same with `lsp`.
 */
import * as path from 'path';

export interface PtdebugSettings {
    /** ptdebug.pythonPath: interpreter with ptdebug installed; '' = find one. */
    pythonPath: string;
    /** ptdebug.adapterPath: the `ptdebug` console script; wins when set. */
    adapterPath: string;
    /** ptdebug.adapterLogFile: --log-file of the adapter; '' = none. */
    adapterLogFile: string;
    /** ptdebug.logLevel. */
    logLevel: string;
}

export interface CommandLine {
    command: string;
    args: string[];
}

/** The interpreter: the setting, else the workspace's .venv, else python3 on PATH. */
export function pythonInterpreter(settings: PtdebugSettings, workspaceFolders: string[],
    exists: (file: string) => boolean): string {
    if (settings.pythonPath.trim()) {
        return expandHome(settings.pythonPath.trim());
    }
    for (const folder of workspaceFolders) {
        const candidate = path.join(folder, '.venv', 'bin', 'python');
        if (exists(candidate)) {
            return candidate;
        }
    }
    return 'python3';
}

/**
 * `ptdebug SUBCOMMAND` through an interpreter, independent of the current directory (the
 * workspace): `python -m adapter.cli` would put the workspace first on sys.path, and a
 * workspace with its own `adapter/` package (or a `bisect.py`) would be imported instead of
 * ptdebug. `-c` puts '' (the current directory) first instead; it is removed before anything
 * is imported. Not `-I`: that would also drop PYTHONPATH and the user's site-packages, where
 * `pip install --user` puts ptdebug. Must stay the same as SAFE_START in
 * tests/e2e/test_workspace_independence.py, which runs it from such a workspace.
 */
export const SAFE_START = "import sys; sys.path[:1] = [p for p in sys.path[:1] if p]; "
    + "from adapter.cli import main; sys.exit(main())";

/** `ptdebug SUBCOMMAND` as a command line, through the console script or the interpreter. */
export function ptdebugCommand(subcommand: string[], settings: PtdebugSettings,
    workspaceFolders: string[], exists: (file: string) => boolean): CommandLine {
    if (settings.adapterPath.trim()) {
        return { command: expandHome(settings.adapterPath.trim()), args: [...subcommand] };
    }
    return {
        command: pythonInterpreter(settings, workspaceFolders, exists),
        args: ['-c', SAFE_START, ...subcommand],
    };
}

/** The DAP adapter over stdio, with the log options the settings ask for. */
export function adapterCommand(settings: PtdebugSettings, workspaceFolders: string[],
    exists: (file: string) => boolean): CommandLine {
    const sub = ['dap'];
    if (settings.adapterLogFile.trim()) {
        sub.push('--log-file', expandHome(settings.adapterLogFile.trim()));
    }
    if (settings.logLevel && settings.logLevel !== 'INFO') {
        sub.push('--log-level', settings.logLevel);
    }
    return ptdebugCommand(sub, settings, workspaceFolders, exists);
}

function expandHome(file: string): string {
    const home = process.env.HOME;
    return file.startsWith('~/') && home ? path.join(home, file.slice(2)) : file;
}
