/**
 * The hot-lines language server client: starts `ptdebug lsp` over stdio and points it at a
 * capture, so editors show executions, cycles and share of the window per source line.
 *
 * Layer: extension (vscode + vscode-languageclient). The server (adapter/lsp/server.py) does
 * the decoding; this file only starts it and asks it to show a capture (`ptdebug.lsp.openBundle`).
 */
import * as vscode from 'vscode';
import { ExecuteCommandRequest, LanguageClient, LanguageClientOptions, ServerOptions, TransportKind } from 'vscode-languageclient/node';
import type { CommandLine } from './adapterCommand';

/** The server command that shows a capture; answered once it is decoded (docs/vscode.md). */
export const OPEN_BUNDLE_COMMAND = 'ptdebug.lsp.openBundle';

export class HotLines {
    private client: LanguageClient | undefined;
    private starting: Promise<void> | undefined;

    constructor(private readonly command: () => CommandLine, private readonly output: vscode.OutputChannel) {}

    /** Shows `bundle`'s hot lines in every open and later-opened source file; resolves once
     * the server has decoded it, under a progress notification (a long decode shows). */
    async open(bundle: string): Promise<void> {
        await this.ensureStarted();
        const result = await vscode.window.withProgress(
            { location: vscode.ProgressLocation.Notification, title: `ptdebug: decoding capture ${bundle}` },
            () => this.client!.sendRequest(ExecuteCommandRequest.type,
                { command: OPEN_BUNDLE_COMMAND, arguments: [bundle] })) as { ok?: boolean } | null;
        if (!result?.ok) {
            throw new Error(`the language server could not show ${bundle} (see the ptdebug output)`);
        }
    }

    private ensureStarted(): Promise<void> {
        if (!this.starting) {
            const line = this.command();
            const serverOptions: ServerOptions = {
                command: line.command, args: line.args, transport: TransportKind.stdio,
            };
            const clientOptions: LanguageClientOptions = {
                documentSelector: ['python', 'go', 'c', 'cpp'].map(language => ({ scheme: 'file', language })),
                outputChannel: this.output,
            };
            this.client = new LanguageClient('ptdebug.hotLines', 'ptdebug hot lines', serverOptions, clientOptions);
            this.starting = this.client.start().catch(error => {
                this.starting = undefined;
                this.client = undefined;
                throw new Error(`could not start the ptdebug language server (${line.command} ${line.args.join(' ')}): ${error.message ?? error}`);
            });
        }
        return this.starting;
    }

    async dispose(): Promise<void> {
        if (this.client) {
            await this.client.stop();
        }
    }
}
