/**
 * The "Trace Captures" tree view (Run and Debug side bar): captures grouped by where they came
 * from, newest first; each opens the hot lines, exports, or reveals its bundle.
 *
 * Layer: extension (vscode). Shows a CaptureStore; knows nothing of DAP.
 */
import * as vscode from 'vscode';
import { Capture, CaptureStore, captureLabel, captureTooltip, describeCapture } from './captureModel';

type Node = { kind: 'origin'; origin: string } | { kind: 'capture'; capture: Capture };

export class CapturesView implements vscode.TreeDataProvider<Node> {
    private readonly emitter = new vscode.EventEmitter<Node | undefined>();
    readonly onDidChangeTreeData = this.emitter.event;

    constructor(private readonly store: CaptureStore) {
        store.onDidChange(() => this.emitter.fire(undefined));
    }

    getChildren(node?: Node): Node[] {
        if (!node) {
            const origins = this.store.origins();
            if (origins.length === 1) {
                return this.store.list().map(capture => ({ kind: 'capture', capture }));
            }
            return origins.map(origin => ({ kind: 'origin', origin }));
        }
        if (node.kind === 'origin') {
            return this.store.list().filter(c => c.origin === node.origin)
                .map(capture => ({ kind: 'capture', capture }));
        }
        return [];
    }

    getTreeItem(node: Node): vscode.TreeItem {
        if (node.kind === 'origin') {
            const item = new vscode.TreeItem(node.origin, vscode.TreeItemCollapsibleState.Expanded);
            item.iconPath = new vscode.ThemeIcon('debug-alt');
            return item;
        }
        const capture = node.capture;
        const item = new vscode.TreeItem(captureLabel(capture), vscode.TreeItemCollapsibleState.None);
        item.description = describeCapture(capture);
        item.tooltip = new vscode.MarkdownString(captureTooltip(capture));
        item.contextValue = 'capture';
        item.iconPath = new vscode.ThemeIcon(capture.status === 'partial' || capture.partial ? 'warning' : 'pulse');
        item.command = { command: 'ptdebug.showHotLines', title: 'Show Hot Lines', arguments: [capture] };
        return item;
    }
}
