/**
 * The "Latency Between Two Points" command's pure parts: the `ptdebug latency` command line
 * and the report rendered from its `--json` summary.
 *
 * Layer: extension, no `vscode` import. Knows the CLI of adapter/commands/latency.py and the JSON
 * it prints (adapter/export/latency.py LatencyReport.summary).
 */
import { formatCount, formatDuration } from './captureModel';

export interface LatencyStats { min: number; p50: number; p90: number; p99: number; max: number; mean: number; }

export interface LatencySummary {
    from: string;
    to: string;
    count: number;
    threads: number[];
    ns?: LatencyStats;
    cycles?: LatencyStats;
}

/** `ptdebug latency` arguments (after the `ptdebug` part of the command line). */
export function latencyArgs(bundle: string, from: string, to: string, png?: string): string[] {
    const args = ['latency', bundle, '--from', from, '--to', to, '--json'];
    if (png) { args.push('--png', png); }
    return args;
}

/** A code point for the line under the cursor: `FILE:LINE` (1-based). */
export function codePoint(file: string, zeroBasedLine: number): string {
    return `${file}:${zeroBasedLine + 1}`;
}

/** The JSON summary printed first on stdout (a `histogram: FILE` line may follow). */
export function parseLatencyOutput(stdout: string): LatencySummary {
    const end = stdout.lastIndexOf('}');
    if (end < 0) {
        throw new Error('ptdebug latency printed no summary');
    }
    const summary = JSON.parse(stdout.slice(0, end + 1)) as LatencySummary;
    if (typeof summary.count !== 'number') {
        throw new Error('ptdebug latency: the summary has no count');
    }
    return summary;
}

export function renderLatency(summary: LatencySummary, bundle: string): string {
    const lines = [`# Latency: ${summary.from} → ${summary.to}`, '', `Capture: ${bundle}`, '',
        `${summary.count} interval(s) on ${summary.threads.length} thread(s)`, ''];
    if (summary.ns && summary.cycles) {
        lines.push('|      | time | cycles |', '|---|---:|---:|');
        for (const key of ['min', 'p50', 'p90', 'p99', 'max', 'mean'] as const) {
            lines.push(`| ${key.toUpperCase()} | ${formatDuration(Math.round(summary.ns[key]))} | ${formatCount(Math.round(summary.cycles[key]))} |`);
        }
    }
    return lines.join('\n') + '\n';
}
