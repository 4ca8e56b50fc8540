/**
 * The ptdebug VS Code extension: registers the `ptdebug` debugger (configurations, the adapter
 * process), the commands, the captures and trace views, and the hot-lines language server.
 *
 * Layer: extension (vscode). The decisions live in pure modules (configuration.ts,
 * adapterCommand.ts, captureModel.ts, historyText.ts); this file wires them to VS Code. The
 * adapter's own surface used here: the custom events/requests `ptdebug/capture`,
 * `ptdebug/captureNow`, `ptdebug/goroutineHistory` (typed by src/schema.ts), and the CLI `ptdebug export`
 * (docs/vscode.md lists them). DAP progress events need nothing here: VS Code shows them
 * as notifications itself, because it announces `supportsProgressReporting`. A launch that
 * cannot work (ptdebug not where the settings find it, an adapter dying before it answers, a
 * missing program) is stopped with an error notification saying what to change: VS Code
 * itself shows nothing when an adapter dies at start.
 */
import * as cp from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import * as vscode from 'vscode';
import { CommandLine, PtdebugSettings, adapterDiedProblem, StartProbe, StartProblem, adapterCommand, ptdebugCommand, startProblem } from './adapterCommand';
import { Capture, CaptureEventBody, CaptureStore, HotLineArgument, captureLabel, describeCapture, describeHotLine, invalidCaptureBody } from './captureModel';
import { CapturesView } from './capturesView';
import { DEBUG_TYPE, EditorContext, RawConfiguration, initialConfigurations, missingProgram, resolveConfiguration, resolveSubstituted } from './configuration';
import { PythonExtensionApi, applyEnvFile, chooseInterpreter, interpreterFromPythonExtension, isPythonLaunch } from './debuggee';
import { renderGoroutineHistory } from './historyText';
import { HotLines } from './hotLines';
import { codePoint, latencyArgs, parseLatencyOutput, renderLatency } from './latencyText';
import { listProcesses, processItems, wantedKind } from './processes';
import type { GoroutineHistoryIn, GoroutineHistoryOut } from './schema';
import { TraceScopeView } from './traceScopeView';

const HISTORY_SCHEME = 'ptdebug-history';
/** How long a ptdebug custom request may take before the user is told it got no answer. */
const CUSTOM_REQUEST_TIMEOUT_MS = 120_000;

/** `session.customRequest` that fails with a clear message instead of waiting forever (an
 * adapter that does not know the request may forward it to a backend that drops it). */
function ptdebugRequest(session: vscode.DebugSession, command: string, args: object): Promise<unknown> {
    return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`the adapter did not answer ${command} within ` +
            `${CUSTOM_REQUEST_TIMEOUT_MS / 1000} s (does this ptdebug version support it?)`)), CUSTOM_REQUEST_TIMEOUT_MS);
        Promise.resolve(session.customRequest(command, args)).then(
            value => { clearTimeout(timer); resolve(value); },
            error => { clearTimeout(timer); reject(error); });
    });
}

export function activate(context: vscode.ExtensionContext): void {
    const output = vscode.window.createOutputChannel('ptdebug');
    const store = new CaptureStore();
    const traceScope = new TraceScopeView();
    const hotLines = new HotLines(() => ptdebugCommand(['lsp'], settings(), workspaceFolders(), fs.existsSync), output);
    const histories = new Map<string, string>();
    const historyChanged = new vscode.EventEmitter<vscode.Uri>();
    /** Debug session id -> the thread of its latest stop (Capture Trace Now follows it). */
    const stoppedThread = new Map<string, number>();

    context.subscriptions.push(
        output,
        vscode.debug.registerDebugConfigurationProvider(DEBUG_TYPE, new ConfigurationProvider(output)),
        vscode.debug.registerDebugConfigurationProvider(DEBUG_TYPE, {
            provideDebugConfigurations: () => initialConfigurations(editorContext(undefined)) as vscode.DebugConfiguration[],
        }, vscode.DebugConfigurationProviderTriggerKind.Dynamic),
        vscode.debug.registerDebugAdapterDescriptorFactory(DEBUG_TYPE, new AdapterFactory(output)),
        vscode.debug.registerDebugAdapterTrackerFactory(DEBUG_TYPE, {
            createDebugAdapterTracker: session => {
                /** Whether the adapter sent anything: an exit before that is a failed start. */
                let answered = false;
                /** Whether VS Code asked the adapter to end (a disconnect or terminate request, the
                 * Stop button): an exit after that is expected, whatever its status. */
                let asked = false;
                return {
                    onWillReceiveMessage: (message: { type?: string; command?: string }) => {
                        if (message.type === 'request' && (message.command === 'disconnect' || message.command === 'terminate')) {
                            asked = true;
                        }
                    },
                    onDidSendMessage: (message: { type?: string; event?: string; body?: { threadId?: number } }) => {
                        answered = true;
                        if (message.type !== 'event') { return; }
                        if (message.event === 'stopped') {
                            if (message.body?.threadId !== undefined) {
                                stoppedThread.set(session.id, message.body.threadId);
                            }
                            void traceScope.stopped(session, message.body?.threadId);
                        } else if (message.event === 'continued') {
                            traceScope.cleared('Running.');
                        }
                    },
                    onWillStopSession: () => traceScope.cleared('No ptdebug session.'),
                    // The adapter died before it said a word (a broken install, a crash at import),
                    // or in the middle of the session (killed, crashed): VS Code shows nothing in
                    // either case, so the user is told what happened and what to do.
                    onExit: (code: number | undefined, signal: string | undefined) =>
                        asked || (code === 0 && !signal) ? undefined
                            : answered ? notifyProblem(adapterDiedProblem(session, code, signal, settings().adapterLogFile), output)
                                : reportEarlyExit(session, code, signal, output),
                };
            },
        }),
        vscode.debug.onDidReceiveDebugSessionCustomEvent(event => {
            if (event.session.type !== DEBUG_TYPE || event.event !== 'ptdebug/capture') { return; }
            const problem = invalidCaptureBody(event.body);
            if (problem) {
                output.appendLine(`ignored a ptdebug/capture event: ${problem}`);
                return;
            }
            const capture = store.add(event.session.name, event.body as CaptureEventBody);
            if (vscode.workspace.getConfiguration('ptdebug').get<boolean>('hotLines.enabled', true)) {
                hotLines.open(capture.bundle).catch(error => output.appendLine(String(error.message ?? error)));
            }
        }),
        vscode.window.registerTreeDataProvider('ptdebug.captures', new CapturesView(store)),
        vscode.window.registerTreeDataProvider('ptdebug.traceScope', traceScope),
        vscode.workspace.registerTextDocumentContentProvider(HISTORY_SCHEME, {
            onDidChange: historyChanged.event,
            provideTextDocumentContent: uri => histories.get(uri.toString()) ?? '',
        }),
        vscode.commands.registerCommand('ptdebug.captureNow', () => captureNow(store, stoppedThread)),
        vscode.commands.registerCommand('ptdebug.showCaptures', () =>
            vscode.commands.executeCommand('ptdebug.captures.focus')),
        vscode.commands.registerCommand('ptdebug.openBundle', async () => {
            const picked = await vscode.window.showOpenDialog({
                canSelectFiles: false, canSelectFolders: true, canSelectMany: false,
                openLabel: 'Open Trace Bundle',
            });
            if (!picked?.length) { return; }
            const bundle = picked[0].fsPath;
            if (!fs.existsSync(path.join(bundle, 'manifest.json'))) {
                void vscode.window.showErrorMessage(`ptdebug: ${bundle} is not a trace bundle (no manifest.json).`);
                return;
            }
            const capture = store.add('opened', { bundle });
            await showHotLines(capture);
        }),
        vscode.commands.registerCommand('ptdebug.showHotLines', (capture?: Capture) =>
            pickCapture(store, capture).then(c => c && showHotLines(c))),
        vscode.commands.registerCommand('ptdebug.exportPprof', (capture?: Capture) =>
            exportCapture(store, capture, 'pprof', output)),
        vscode.commands.registerCommand('ptdebug.exportPerfetto', (capture?: Capture) =>
            exportCapture(store, capture, 'perfetto', output)),
        vscode.commands.registerCommand('ptdebug.replayCapture', async (given?: Capture) => {
            const capture = await pickCapture(store, given);
            if (!capture) { return; }
            // the same launch configuration a user writes ("replay": PATH): no live process
            const folder = vscode.workspace.workspaceFolders?.find(f => capture.bundle.startsWith(f.uri.fsPath + path.sep));
            const started = await vscode.debug.startDebugging(folder, {
                type: DEBUG_TYPE, request: 'launch', name: `Replay ${captureLabel(capture)}`, replay: capture.bundle,
            });
            if (!started) {
                void vscode.window.showErrorMessage(`ptdebug: the replay of ${capture.bundle} did not start (the Debug Console says why).`);
            }
        }),
        vscode.commands.registerCommand('ptdebug.revealCapture', async (given?: Capture) => {
            const capture = await pickCapture(store, given);
            if (capture) { await vscode.commands.executeCommand('revealFileInOS', vscode.Uri.file(capture.bundle)); }
        }),
        vscode.commands.registerCommand('ptdebug.deleteCapture', async (given?: Capture) => {
            const capture = await pickCapture(store, given);
            if (!capture) { return; }
            // kept captures are removed only by the user, and only once asked (issue 15)
            const choice = await vscode.window.showWarningMessage(
                `Delete the capture ${captureLabel(capture)}? Its bundle folder ${capture.bundle} is removed from disk.`,
                { modal: true }, 'Delete');
            if (choice !== 'Delete') { return; }
            try {
                if (!fs.existsSync(path.join(capture.bundle, 'manifest.json'))) {
                    throw new Error(`${capture.bundle} is not a trace bundle (no manifest.json): not deleted`);
                }
                await fs.promises.rm(capture.bundle, { recursive: true });
            } catch (error) {
                void vscode.window.showErrorMessage(`ptdebug: deleting the capture failed: ${(error as Error).message}`);
                return;
            }
            store.remove(capture.key);
        }),
        vscode.commands.registerCommand('ptdebug.showGoroutineHistory', async (given?: Capture) => {
            const session = activePtdebugSession();
            if (!session) { return; }
            const capture = await pickCapture(store, given);
            if (!capture) { return; }
            try {
                const args: GoroutineHistoryIn = { bundle: capture.bundle };
                const body = await vscode.window.withProgress(
                    { location: vscode.ProgressLocation.Notification, title: 'ptdebug: indexing goroutines' },
                    () => ptdebugRequest(session, 'ptdebug/goroutineHistory', args)) as GoroutineHistoryOut;
                const uri = vscode.Uri.parse(`${HISTORY_SCHEME}:/${encodeURIComponent(session.name)}/goroutines-${capture.serial}.md`);
                histories.set(uri.toString(), renderGoroutineHistory(body, capture.bundle));
                historyChanged.fire(uri);
                const doc = await vscode.workspace.openTextDocument(uri);
                await vscode.window.showTextDocument(doc, { preview: true });
            } catch (error) {
                void vscode.window.showErrorMessage(`ptdebug: goroutine history: ${(error as Error).message}`);
            }
        }),
        vscode.commands.registerCommand('ptdebug.refreshTraceScope', () => traceScope.refresh()),
        // `${command:pickProcess}` (the debugger's `variables`) and `${command:ptdebug.pickProcess}`:
        // VS Code passes the configuration being resolved; its backend narrows the list.
        vscode.commands.registerCommand('ptdebug.pickProcess', (config?: RawConfiguration) => pickProcess(config)),
        // The command of each hot-line lens of `ptdebug lsp` (its SHOW_LINE_COMMAND).
        vscode.commands.registerCommand('ptdebug.showLine', async (arg?: HotLineArgument) => {
            try {
                const text = describeHotLine(arg as HotLineArgument);
                const editor = await vscode.window.showTextDocument(vscode.Uri.file(arg!.file), { preview: true });
                const position = new vscode.Position(Math.max(0, arg!.line - 1), 0);
                editor.selection = new vscode.Selection(position, position);
                editor.revealRange(new vscode.Range(position, position), vscode.TextEditorRevealType.InCenterIfOutsideViewport);
                output.appendLine(text);
                void vscode.window.showInformationMessage(`ptdebug: ${text}`);
            } catch (error) {
                void vscode.window.showErrorMessage(`ptdebug: hot line: ${(error as Error).message}`);
            }
        }),
        vscode.commands.registerCommand('ptdebug.latency', async (capture?: Capture) => {
            const picked = await pickCapture(store, capture);
            if (!picked) { return; }
            const editor = vscode.window.activeTextEditor;
            const here = editor?.document.uri.scheme === 'file'
                ? codePoint(editor.document.uri.fsPath, editor.selection.active.line) : '';
            const from = await vscode.window.showInputBox({ prompt: 'From (FUNCTION, FILE:LINE or 0xADDR)', value: here });
            if (!from) { return; }
            const to = await vscode.window.showInputBox({ prompt: 'To (FUNCTION, FILE:LINE or 0xADDR)', value: from });
            if (!to) { return; }
            const png = path.join(os.tmpdir(), `ptdebug-latency-${Date.now()}.png`);
            const line = ptdebugCommand(latencyArgs(picked.bundle, from, to, png), settings(), workspaceFolders(), fs.existsSync);
            try {
                const stdout = await runCli(line, `ptdebug: latency ${from} → ${to}`, output);
                const uri = vscode.Uri.parse(`${HISTORY_SCHEME}:/latency-${Date.now()}.md`);
                histories.set(uri.toString(), renderLatency(parseLatencyOutput(stdout), picked.bundle));
                historyChanged.fire(uri);
                await vscode.window.showTextDocument(await vscode.workspace.openTextDocument(uri), { preview: true });
                if (fs.existsSync(png)) {
                    await vscode.commands.executeCommand('vscode.open', vscode.Uri.file(png), vscode.ViewColumn.Beside);
                }
            } catch (error) {
                void vscode.window.showErrorMessage(`ptdebug: latency: ${(error as Error).message}`);
            }
        }),
        { dispose: () => { void hotLines.dispose(); } },
    );

    async function showHotLines(capture: Capture): Promise<void> {
        try {
            await hotLines.open(capture.bundle);
            void vscode.window.setStatusBarMessage(`ptdebug: hot lines of ${captureLabel(capture)}`, 5000);
        } catch (error) {
            void vscode.window.showErrorMessage(`ptdebug: ${(error as Error).message}`);
        }
    }
}

export function deactivate(): void {
    // Subscriptions (the language client included) are disposed by VS Code.
}

/** How long the probe of the adapter (`ptdebug --version`) may take; past it, the launch goes on. */
const PROBE_TIMEOUT_MS = 20_000;
const OPEN_SETTING = 'Open Setting';
/** Probe command lines that started ptdebug in this window: each is probed once (0.1-0.5 s). */
const startsFine = new Set<string>();

/** Runs `line` and reports how it ended (never rejects). */
function probeStart(line: CommandLine): Promise<StartProbe & { timedOut: boolean }> {
    return new Promise(resolve => {
        cp.execFile(line.command, line.args, { timeout: PROBE_TIMEOUT_MS }, (error, _stdout, stderr) => {
            const failure = error as (cp.ExecFileException & { code?: string | number }) | null;
            if (!failure) {
                resolve({ status: 0, stderr: String(stderr), timedOut: false });
            } else if (typeof failure.code === 'string') {
                resolve({ spawnError: failure.code, status: null, stderr: String(stderr), timedOut: false });
            } else {
                // killed: only execFile's timeout kills it (the exit code is then null)
                resolve({ status: typeof failure.code === 'number' ? failure.code : null, stderr: String(stderr),
                    timedOut: failure.killed === true });
            }
        });
    });
}

/** Why ptdebug cannot start from where the settings find it, or undefined when it starts (or
 * the probe took too long to tell: the launch then goes on and says for itself). */
async function adapterStartProblem(output: vscode.OutputChannel): Promise<StartProblem | undefined> {
    const config = settings();
    const line = ptdebugCommand(['--version'], config, workspaceFolders(), fs.existsSync);
    const key = JSON.stringify(line);
    if (startsFine.has(key)) { return undefined; }
    const probe = await probeStart(line);
    if (probe.timedOut) {
        output.appendLine(`${line.command} ${line.args.join(' ')} did not answer within ${PROBE_TIMEOUT_MS / 1000} s; starting the adapter anyway`);
        return undefined;
    }
    const problem = startProblem(line, config, probe);
    if (!problem) { startsFine.add(key); }
    return problem;
}

/** The notification of a problem (a start problem, an adapter that died), with a button that opens the setting to change. */
function notifyProblem(problem: StartProblem, output: vscode.OutputChannel): Promise<unknown> {
    output.appendLine(problem.message);
    return Promise.resolve(vscode.window.showErrorMessage(problem.message, OPEN_SETTING)).then(choice =>
        choice === OPEN_SETTING ? vscode.commands.executeCommand('workbench.action.openSettings', problem.setting) : undefined);
}

/** The adapter process ended before it answered anything. */
async function reportEarlyExit(session: vscode.DebugSession, code: number | undefined, signal: string | undefined,
    output: vscode.OutputChannel): Promise<unknown> {
    startsFine.clear();  // what started before may be gone now
    const problem = await adapterStartProblem(output) ?? {
        setting: 'ptdebug.adapterLogFile' as const,
        message: `ptdebug: the debug adapter of "${session.name}" exited at start (${code !== undefined ? `status ${code}` : `signal ${signal}`}) ` +
            'before answering VS Code. ' + (settings().adapterLogFile.trim()
            ? `Its log: ${settings().adapterLogFile.trim()}.` : 'Set ptdebug.adapterLogFile to keep its log, and start the session again.'),
    };
    return notifyProblem(problem, output);
}

function settings(): PtdebugSettings {
    const config = vscode.workspace.getConfiguration('ptdebug');
    return {
        pythonPath: config.get<string>('pythonPath', ''),
        adapterPath: config.get<string>('adapterPath', ''),
        adapterLogFile: config.get<string>('adapterLogFile', ''),
        logLevel: config.get<string>('logLevel', 'INFO'),
    };
}

function workspaceFolders(): string[] {
    return (vscode.workspace.workspaceFolders ?? []).map(f => f.uri.fsPath);
}

function editorContext(folder: vscode.WorkspaceFolder | undefined): EditorContext {
    const editor = vscode.window.activeTextEditor;
    return {
        activeFile: editor?.document.uri.scheme === 'file' ? editor.document.uri.fsPath : undefined,
        languageId: editor?.document.languageId,
        workspaceFolder: folder?.uri.fsPath ?? vscode.workspace.workspaceFolders?.[0]?.uri.fsPath,
    };
}

class ConfigurationProvider implements vscode.DebugConfigurationProvider {
    constructor(private readonly output: vscode.OutputChannel) {}

    provideDebugConfigurations(folder: vscode.WorkspaceFolder | undefined): vscode.DebugConfiguration[] {
        return initialConfigurations(editorContext(folder)) as vscode.DebugConfiguration[];
    }

    resolveDebugConfiguration(folder: vscode.WorkspaceFolder | undefined,
        config: vscode.DebugConfiguration): vscode.DebugConfiguration | undefined {
        const result = resolveConfiguration(config as RawConfiguration, editorContext(folder));
        if (!result.ok) {
            void vscode.window.showErrorMessage(result.message);
            return undefined;
        }
        return result.configuration as vscode.DebugConfiguration;
    }

    /** After `${...}` substitution: process ids as numbers, envFile read into env, and the
     * interpreter of a Python launch (debuggee.ts says in which order). */
    async resolveDebugConfigurationWithSubstitutedVariables(folder: vscode.WorkspaceFolder | undefined,
        config: vscode.DebugConfiguration): Promise<vscode.DebugConfiguration | undefined> {
        let result = resolveSubstituted(config as RawConfiguration);
        if (result.ok) {
            result = applyEnvFile(result.configuration, file => fs.readFileSync(file, 'utf8'));
        }
        if (!result.ok) {
            void vscode.window.showErrorMessage(result.message);
            return undefined;
        }
        const resolved = result.configuration;
        const workspaceFolder = (folder ?? vscode.workspace.workspaceFolders?.[0])?.uri.fsPath;
        const missing = missingProgram(resolved, workspaceFolder, fs.existsSync);
        if (missing) {
            void vscode.window.showErrorMessage(missing);
            return undefined;
        }
        // Undefined aborts the launch without a word from VS Code: the notification is the word.
        const problem = await adapterStartProblem(this.output);
        if (problem) {
            void notifyProblem(problem, this.output);
            return undefined;
        }
        if (isPythonLaunch(resolved)) {
            const workspace = folder ?? vscode.workspace.workspaceFolders?.[0];
            const choice = chooseInterpreter(resolved, await pythonExtensionInterpreter(workspace, this.output),
                workspace?.uri.fsPath, fs.existsSync);
            if (choice.python !== undefined) {
                resolved.python = choice.python;
            }
            this.output.appendLine(`session ${resolved.name}: the program's interpreter: ` +
                (choice.python === undefined ? "the adapter's" : `${JSON.stringify(choice.python)}`) + ` (${choice.source})`);
        }
        return resolved as vscode.DebugConfiguration;
    }
}

/** The interpreter the Python extension (ms-python.python) has selected for the folder, when
 * that extension is installed; undefined otherwise or when it cannot say. */
async function pythonExtensionInterpreter(folder: vscode.WorkspaceFolder | undefined,
    output: vscode.OutputChannel): Promise<string | string[] | undefined> {
    const extension = vscode.extensions.getExtension<PythonExtensionApi>('ms-python.python');
    if (!extension) { return undefined; }
    try {
        const api = extension.isActive ? extension.exports : await extension.activate();
        return await interpreterFromPythonExtension(api, folder?.uri);
    } catch (error) {
        output.appendLine(`the Python extension did not give its interpreter: ${(error as Error).message}`);
        return undefined;
    }
}

/** The quick pick of `ptdebug.pickProcess`: the pid as a string (VS Code substitutes it), or
 * undefined when the user cancels (VS Code then does not start the session). */
async function pickProcess(config: RawConfiguration | undefined): Promise<string | undefined> {
    const kind = wantedKind(config);
    let items;
    try {
        items = processItems(listProcesses(kind));
    } catch (error) {
        void vscode.window.showErrorMessage(`ptdebug: ${(error as Error).message}`);
        return undefined;
    }
    if (items.length === 0) {
        void vscode.window.showErrorMessage(`ptdebug: no running ${kind === 'go' ? 'Go' : kind === 'python' ? 'Python' : 'Python or Go'} process to attach to.`);
        return undefined;
    }
    const picked = await vscode.window.showQuickPick(items, {
        placeHolder: `Attach to which ${kind === 'go' ? 'Go' : kind === 'python' ? 'Python' : 'Python or Go'} process?`,
        matchOnDescription: true, matchOnDetail: true,
    });
    return picked ? String(picked.pid) : undefined;
}

class AdapterFactory implements vscode.DebugAdapterDescriptorFactory {
    constructor(private readonly output: vscode.OutputChannel) {}

    createDebugAdapterDescriptor(session: vscode.DebugSession): vscode.DebugAdapterDescriptor {
        const line = adapterCommand(settings(), workspaceFolders(), fs.existsSync);
        this.output.appendLine(`session ${session.name}: ${line.command} ${line.args.join(' ')}`);
        return new vscode.DebugAdapterExecutable(line.command, line.args,
            { cwd: session.workspaceFolder?.uri.fsPath });
    }
}

function activePtdebugSession(): vscode.DebugSession | undefined {
    const session = vscode.debug.activeDebugSession;
    if (!session || session.type !== DEBUG_TYPE) {
        void vscode.window.showWarningMessage('ptdebug: start a ptdebug debug session first.');
        return undefined;
    }
    return session;
}

async function captureNow(store: CaptureStore, stoppedThread: Map<string, number>): Promise<void> {
    const session = activePtdebugSession();
    if (!session) { return; }
    const threadId = stoppedThread.get(session.id);
    try {
        const body = await vscode.window.withProgress(
            { location: vscode.ProgressLocation.Notification, title: 'ptdebug: capturing trace' },
            () => ptdebugRequest(session, 'ptdebug/captureNow', threadId === undefined ? {} : { threadId }));
        // The adapter also sends a ptdebug/capture event; the store does not duplicate a bundle.
        if (!invalidCaptureBody(body)) {
            store.add(session.name, body as CaptureEventBody);
        }
    } catch (error) {
        void vscode.window.showErrorMessage(`ptdebug: Capture Trace Now: ${(error as Error).message}`);
    }
}

async function pickCapture(store: CaptureStore, given?: Capture): Promise<Capture | undefined> {
    if (given?.bundle) { return given; }
    const captures = store.list();
    if (captures.length === 0) {
        const picked = await vscode.window.showOpenDialog({
            canSelectFiles: false, canSelectFolders: true, openLabel: 'Use Trace Bundle',
        });
        return picked?.length ? store.add('opened', { bundle: picked[0].fsPath }) : undefined;
    }
    if (captures.length === 1) { return captures[0]; }
    const item = await vscode.window.showQuickPick(captures.map(capture => ({
        label: captureLabel(capture), description: describeCapture(capture), detail: capture.bundle, capture,
    })), { placeHolder: 'Which capture?' });
    return item?.capture;
}

async function exportCapture(store: CaptureStore, given: Capture | undefined, format: 'pprof' | 'perfetto',
    output: vscode.OutputChannel): Promise<void> {
    const capture = await pickCapture(store, given);
    if (!capture) { return; }
    const suffix = format === 'pprof' ? '.pb.gz' : '.perfetto.json';
    const target = await vscode.window.showSaveDialog({
        defaultUri: vscode.Uri.file(capture.bundle.replace(/\/+$/, '') + suffix),
        saveLabel: `Export to ${format}`,
    });
    if (!target) { return; }
    const line = ptdebugCommand(['export', format, capture.bundle, '-o', target.fsPath], settings(), workspaceFolders(), fs.existsSync);
    try {
        await runCli(line, `ptdebug: exporting to ${format}`, output);
    } catch (error) {
        void vscode.window.showErrorMessage(`ptdebug: export to ${format} failed: ${(error as Error).message}`);
        return;
    }
    const hint = format === 'pprof' ? `go tool pprof -http=: ${target.fsPath}` : 'open it in ui.perfetto.dev';
    const choice = await vscode.window.showInformationMessage(`ptdebug: wrote ${target.fsPath} (${hint})`, 'Reveal');
    if (choice === 'Reveal') {
        await vscode.commands.executeCommand('revealFileInOS', target);
    }
}

/** Runs a ptdebug CLI command under a cancellable progress notification; its stdout. */
function runCli(line: CommandLine, title: string, output: vscode.OutputChannel): Promise<string> {
    output.appendLine(`${line.command} ${line.args.join(' ')}`);
    return Promise.resolve(vscode.window.withProgress(
        { location: vscode.ProgressLocation.Notification, title, cancellable: true },
        (_progress, token) => new Promise<string>((resolve, reject) => {
            const child = cp.execFile(line.command, line.args, { maxBuffer: 16 << 20 }, (error, stdout, stderr) => {
                if (stderr) { output.append(stderr); }
                if (error) {
                    reject(new Error(stderr.trim().split('\n').pop() || error.message));
                } else {
                    resolve(stdout);
                }
            });
            token.onCancellationRequested(() => child.kill());
        })));
}
