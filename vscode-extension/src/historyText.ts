/**
 * Text rendering of the goroutine history a ptdebug Go session returns for the custom request
 * `ptdebug/goroutineHistory` (GoroutineHistoryIn -> GoroutineHistoryOut of schema.py, whose
 * TypeScript interfaces src/schema.ts is generated from).
 *
 * Role: formatting for the "Show Goroutine History" document. Layer: extension, no `vscode`
 * import.
 */
import { formatCount, formatDuration } from './captureModel';
import type { GoroutineHistoryEntry, GoroutineHistoryOut } from './schema';

/** How many ranges of one goroutine the document lists. */
export const RANGES_SHOWN = 20;

function goroutineName(goid: number): string {
    if (goid === 0) { return 'g0 (scheduler, system stack)'; }
    if (goid < 0) { return 'unknown goroutine (before any goid was seen)'; }
    return `goroutine ${goid}`;
}

export function renderGoroutineHistory(body: GoroutineHistoryOut, bundle?: string): string {
    if (!body || !Array.isArray(body.goroutines)) {
        throw new Error('ptdebug/goroutineHistory: the response has no "goroutines" array');
    }
    const time = (value: number) => body.timeUnit === 'ns' ? formatDuration(value) : `${formatCount(value)} ${body.timeUnit}`;
    const lines: string[] = ['# Goroutine history', ''];
    if (bundle) {
        lines.push(`Capture: ${bundle}`, '');
    }
    if (body.goroutines.length === 0) {
        lines.push('No goroutine ran in the recorded window.');
        return lines.join('\n') + '\n';
    }
    const sorted: GoroutineHistoryEntry[] = [...body.goroutines]
        .sort((a, b) => b.cycles - a.cycles || a.thread - b.thread || a.goid - b.goid);
    const origin = Math.min(...sorted.flatMap(g => g.ranges.map(r => r.startTime)));
    for (const g of sorted) {
        lines.push(`## ${goroutineName(g.goid)} on thread ${g.thread}`);
        lines.push(`${formatCount(g.instructions)} instructions, ${formatCount(g.cycles)} cycles, ` +
            `${time(g.time)} in ${g.ranges.length}${g.truncated ? '+' : ''} range(s); confidence: ${g.confidence}`);
        for (const r of g.ranges.slice(0, RANGES_SHOWN)) {
            lines.push(`  +${time(r.startTime - origin).padEnd(10)} ${time(r.stopTime - r.startTime).padEnd(10)} ` +
                `instructions ${r.start}..${r.stop - 1}`);
        }
        const hidden = g.ranges.length - RANGES_SHOWN;
        if (g.truncated) {
            lines.push('  ... more range(s) not shown');
        } else if (hidden > 0) {
            lines.push(`  ... ${hidden} range(s) not shown`);
        }
        lines.push('');
    }
    return lines.join('\n');
}
