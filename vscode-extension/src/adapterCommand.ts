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

/**
 * The interpreter that runs ptdebug: the setting, else the workspace's `.venv` when ptdebug is
 * installed in it (its `bin/ptdebug` exists), else undefined (see ptdebugCommand). A workspace
 * .venv without ptdebug is the program's interpreter (debuggee.ts), not the adapter's.
 */
export function pythonInterpreter(settings: PtdebugSettings, workspaceFolders: string[],
    exists: (file: string) => boolean): string | undefined {
    if (settings.pythonPath.trim()) {
        return expandHome(settings.pythonPath.trim());
    }
    for (const folder of workspaceFolders) {
        const bin = path.join(folder, '.venv', 'bin');
        if (exists(path.join(bin, 'python')) && exists(path.join(bin, 'ptdebug'))) {
            return path.join(bin, 'python');
        }
    }
    return undefined;
}

/** `name` in the directories of PATH, as the shell finds it; undefined when absent. */
export function searchPath(name: string, exists: (file: string) => boolean,
    pathVariable: string | undefined = process.env.PATH): string | undefined {
    for (const dir of (pathVariable ?? '').split(path.delimiter)) {
        if (dir && path.isAbsolute(dir) && exists(path.join(dir, name))) {
            return path.join(dir, name);
        }
    }
    return undefined;
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

/**
 * `ptdebug SUBCOMMAND` as a command line, from wherever ptdebug is installed: the
 * `ptdebug.adapterPath` console script; the interpreter of `ptdebug.pythonPath` or of a
 * workspace .venv holding ptdebug; the `ptdebug` console script on PATH (pipx, pip --user,
 * a system install: a console script's sys.path starts at its own bin/, never the cwd); else
 * `python3`.
 */
export function ptdebugCommand(subcommand: string[], settings: PtdebugSettings,
    workspaceFolders: string[], exists: (file: string) => boolean,
    pathVariable: string | undefined = process.env.PATH): CommandLine {
    if (settings.adapterPath.trim()) {
        return { command: expandHome(settings.adapterPath.trim()), args: [...subcommand] };
    }
    const python = pythonInterpreter(settings, workspaceFolders, exists);
    if (python) {
        return { command: python, args: ['-c', SAFE_START, ...subcommand] };
    }
    const script = searchPath('ptdebug', exists, pathVariable);
    if (script) {
        return { command: script, args: [...subcommand] };
    }
    return { command: 'python3', args: ['-c', SAFE_START, ...subcommand] };
}

/** The DAP adapter over stdio, with the log options the settings ask for. */
export function adapterCommand(settings: PtdebugSettings, workspaceFolders: string[],
    exists: (file: string) => boolean, pathVariable: string | undefined = process.env.PATH): CommandLine {
    const sub = ['dap'];
    if (settings.adapterLogFile.trim()) {
        sub.push('--log-file', expandHome(settings.adapterLogFile.trim()));
    }
    if (settings.logLevel && settings.logLevel !== 'INFO') {
        sub.push('--log-level', settings.logLevel);
    }
    return ptdebugCommand(sub, settings, workspaceFolders, exists, pathVariable);
}

function expandHome(file: string): string {
    const home = process.env.HOME;
    return file.startsWith('~/') && home ? path.join(home, file.slice(2)) : file;
}
