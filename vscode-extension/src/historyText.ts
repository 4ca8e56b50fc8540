/**
 * Text rendering of the goroutine (or thread) history a ptdebug session returns for the
 * custom request `ptdebug/goroutineHistory`.
 *
 * Role: formatting for the "Show Goroutine History" document. Layer: extension, no `vscode`
 * import. Knows the response body documented in docs/vscode.md; unknown keys are ignored so
 * a newer adapter still renders.
 */
import { formatCount, formatDuration } from './captureModel';

export interface HistorySpan {
    /** OS thread the goroutine ran on during the span. */
    tid?: number;
    startNs: number;
    endNs: number;
    /** Function at the start of the span. */
    function?: string;
}

export interface GoroutineHistory {
    /** Goroutine id (Go) or thread id (Python). */
    id: number;
    /** A label: the goroutine's start function, or the thread name. */
    name?: string;
    instructions?: number;
    cycles?: number;
    spans?: HistorySpan[];
}

export interface GoroutineHistoryBody {
    bundle?: string;
    goroutines: GoroutineHistory[];
}

export function renderGoroutineHistory(body: GoroutineHistoryBody): string {
    if (!body || !Array.isArray(body.goroutines)) {
        throw new Error('ptdebug/goroutineHistory: the response has no "goroutines" array');
    }
    const lines: string[] = ['# Goroutine history', ''];
    if (body.bundle) {
        lines.push(`Capture: ${body.bundle}`, '');
    }
    if (body.goroutines.length === 0) {
        lines.push('No goroutine ran in the recorded window.');
        return lines.join('\n') + '\n';
    }
    const sorted = [...body.goroutines].sort((a, b) => (b.cycles ?? 0) - (a.cycles ?? 0) || a.id - b.id);
    const origin = Math.min(...sorted.flatMap(g => (g.spans ?? []).map(s => s.startNs)));
    for (const g of sorted) {
        const totals: string[] = [];
        if (g.instructions !== undefined) { totals.push(`${formatCount(g.instructions)} instructions`); }
        if (g.cycles !== undefined) { totals.push(`${formatCount(g.cycles)} cycles`); }
        const busy = (g.spans ?? []).reduce((sum, s) => sum + Math.max(0, s.endNs - s.startNs), 0);
        if (g.spans && g.spans.length) { totals.push(`${formatDuration(busy)} on CPU in ${g.spans.length} span(s)`); }
        lines.push(`## ${g.id}${g.name ? `  ${g.name}` : ''}`);
        if (totals.length) { lines.push(totals.join(', ')); }
        for (const s of g.spans ?? []) {
            const at = Number.isFinite(origin) ? s.startNs - origin : s.startNs;
            lines.push(`  +${formatDuration(at).padEnd(10)} ${formatDuration(s.endNs - s.startNs).padEnd(10)}` +
                `${s.tid !== undefined ? ` thread ${s.tid}` : ''}${s.function ? `  ${s.function}` : ''}`);
        }
        lines.push('');
    }
    return lines.join('\n');
}
