/**
 * How the extension starts ptdebug's processes: the DAP adapter and the language server.
 *
 * Role: turns the user's settings into a command line. Layer: extension, no `vscode` import
 * (extension.ts reads the settings and passes them here), so it is tested directly. The
 * adapter is `ptdebug dap` through the interpreter (see SAFE_START) or the `ptdebug` console
 * script; the language server is the same with `lsp`. What a failed start means for the user
 * (ptdebug not installed for that interpreter, a setting naming no file) is `startProblem`.
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

/** What running the adapter's command line with `--version` instead of `dap` gave. */
export interface StartProbe {
    /** The spawn's errno code (ENOENT: no such file, EACCES: not executable), if it failed. */
    spawnError?: string;
    /** Exit status, or null when killed by a signal or not started. */
    status: number | null;
    stderr: string;
}

/** Why ptdebug cannot start, for a notification, and the setting that fixes it. */
export interface StartProblem {
    message: string;
    setting: 'ptdebug.adapterPath' | 'ptdebug.pythonPath' | 'ptdebug.adapterLogFile';
}

/**
 * The problem a failed probe of `line` shows (issue 35: without ptdebug.adapterPath or a
 * workspace .venv, F5 ran `python3 -c ... dap`, which died with "No module named 'adapter'"
 * and nothing told the user), or undefined when the probe says ptdebug starts. `settings`
 * say where the command line came from (ptdebugCommand's order), so the message names what to
 * change. VS Code's extension host has the PATH of the login shell it was started from, which
 * may not be the terminal's: the messages say which command was run.
 */
export function startProblem(line: CommandLine, settings: PtdebugSettings, probe: StartProbe): StartProblem | undefined {
    if (!probe.spawnError && probe.status === 0) {
        return undefined;
    }
    const fix = 'pip install ptdebug, or set ptdebug.adapterPath to the `ptdebug` script of an installation';
    const interpreter = line.args[0] === '-c';
    const fromSetting = settings.adapterPath.trim() ? 'ptdebug.adapterPath'
        : interpreter && settings.pythonPath.trim() ? 'ptdebug.pythonPath' : undefined;
    const found = fromSetting ? `${fromSetting} is "${line.command}"`
        : line.command === 'python3' && interpreter
            ? 'no ptdebug.adapterPath, no workspace .venv with ptdebug and no `ptdebug` on the PATH of ' +
              'VS Code, so python3 was tried'
            : `ptdebug was found at ${line.command}`;
    const setting = fromSetting === 'ptdebug.pythonPath' ? 'ptdebug.pythonPath' : 'ptdebug.adapterPath';
    if (probe.spawnError === 'ENOENT') {
        return { setting, message: `ptdebug cannot start: ${found}, which does not exist. ${capitalize(fix)}.` };
    }
    if (probe.spawnError) {
        return { setting, message: `ptdebug cannot start: ${found}, which cannot be run (${probe.spawnError}). ${capitalize(fix)}.` };
    }
    const lastLine = probe.stderr.trim().split('\n').pop() ?? '';
    if (interpreter && /No module named '?adapter/.test(probe.stderr)) {
        return { setting, message: `ptdebug is not installed for ${line.command} (${found}): ` +
            `${line.command} -m ${fix}.` };
    }
    const how = probe.status === null ? 'was killed' : `exited with status ${probe.status}`;
    const shown = interpreter ? [line.command, '-c <start ptdebug>', ...line.args.slice(2)] : [line.command, ...line.args];
    return { setting, message: `ptdebug cannot start: \`${shown.join(' ')}\` ${how}` +
        `${lastLine ? `: ${lastLine}` : ''} (${found}). ${capitalize(fix)}.` };
}

function capitalize(text: string): string {
    return text.charAt(0).toUpperCase() + text.slice(1);
}

/** What a debug session was, for the message about its adapter's death. */
export interface DiedSession {
    name: string;
    /** The resolved configuration: `request`, `replay`, `processId`/`pid`. */
    configuration: { request?: string; replay?: unknown; [key: string]: unknown };
}

/**
 * The notification of an adapter that ended in the middle of a session, after it had answered
 * and before VS Code asked it to end (issue 35: a `ptdebug dap` killed with SIGKILL ended the
 * session with nothing shown, not even VS Code's own message). `code` / `signal`: what the
 * debug adapter tracker's `onExit` got (VS Code 1.139 passes neither for a signal: then
 * "was killed"). What became of the program is what docs/protocol.md promises: a launched
 * program ends with its session (debugpy's launcher, Delve's parent-death signal, ptdebug's
 * subreaper when it can still act), an attached process is let go.
 */
export function adapterDiedProblem(session: DiedSession, code: number | undefined, signal: string | undefined,
    logFile: string): StartProblem {
    const how = code !== undefined && code !== null ? `exited with status ${code}`
        : signal ? `was killed (${signal})` : 'was killed';
    const config = session.configuration;
    const program = config.replay ? 'The replay has nothing running to end.'
        : config.request === 'attach' ? 'The process it attached to is let go, not stopped by ptdebug.'
            : 'The program it launched ends with it.';
    const log = logFile.trim() ? `The adapter's log: ${logFile.trim()}.`
        : 'Set ptdebug.adapterLogFile to keep the adapter\'s log (attach it to a bug report).';
    return {
        setting: 'ptdebug.adapterLogFile',
        message: `ptdebug: the debug adapter of "${session.name}" ${how} in the middle of the session, ` +
            `so the session has ended. ${program} ${log} Press F5 to start it again.`,
    };
}
