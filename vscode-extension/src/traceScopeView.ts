/**
 * The "Processor Trace" view: the trace state at the current stop (TSC, IP, cycles since the
 * window opened, last branches), read from the adapter's "Processor Trace" scope.
 *
 * Layer: extension (vscode). Uses standard DAP only (stackTrace, scopes, variables) through
 * `DebugSession.customRequest`, so it shows whatever the adapter puts in that scope, and says
 * so plainly when a stop has no recorded trace.
 */
import * as vscode from 'vscode';

export const TRACE_SCOPE_NAME = 'Processor Trace';

interface Row { name: string; value: string; variablesReference: number; }

export class TraceScopeView implements vscode.TreeDataProvider<Row> {
    private readonly emitter = new vscode.EventEmitter<Row | undefined>();
    readonly onDidChangeTreeData = this.emitter.event;
    private session: vscode.DebugSession | undefined;
    private threadId: number | undefined;
    private rows: Row[] = [];
    private note = 'Not stopped.';

    /** A ptdebug session stopped on `threadId`: read its trace scope. */
    async stopped(session: vscode.DebugSession, threadId: number | undefined): Promise<void> {
        this.session = session;
        this.threadId = threadId;
        await this.refresh();
    }

    /** The session continued or ended: the view goes blank. */
    cleared(note: string): void {
        this.rows = [];
        this.note = note;
        this.emitter.fire(undefined);
    }

    async refresh(): Promise<void> {
        const session = this.session;
        if (!session || this.threadId === undefined) {
            this.cleared('Not stopped.');
            return;
        }
        try {
            const trace = await session.customRequest('stackTrace', { threadId: this.threadId, startFrame: 0, levels: 1 });
            const frame = trace.stackFrames?.[0];
            if (!frame) {
                this.cleared('No stack frame at this stop.');
                return;
            }
            const { scopes } = await session.customRequest('scopes', { frameId: frame.id });
            const scope = (scopes as Array<{ name: string; variablesReference: number }>)
                .find(s => s.name === TRACE_SCOPE_NAME);
            if (!scope) {
                this.cleared('No trace was recorded before this stop.');
                return;
            }
            const { variables } = await session.customRequest('variables', { variablesReference: scope.variablesReference });
            this.rows = variables as Row[];
            this.note = '';
            this.emitter.fire(undefined);
        } catch (error) {
            this.cleared(`Could not read the trace scope: ${(error as Error).message}`);
        }
    }

    async getChildren(row?: Row): Promise<Row[]> {
        if (!row) {
            return this.rows.length ? this.rows : [{ name: this.note, value: '', variablesReference: 0 }];
        }
        if (!this.session || !row.variablesReference) {
            return [];
        }
        const { variables } = await this.session.customRequest('variables', { variablesReference: row.variablesReference });
        return variables as Row[];
    }

    getTreeItem(row: Row): vscode.TreeItem {
        const item = new vscode.TreeItem(row.name, row.variablesReference
            ? vscode.TreeItemCollapsibleState.Collapsed : vscode.TreeItemCollapsibleState.None);
        item.description = row.value;
        item.tooltip = row.value ? `${row.name} = ${row.value}` : row.name;
        return item;
    }
}
