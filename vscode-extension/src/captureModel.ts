/**
 * The captures the user has: those announced by a debug session (`ptdebug/capture` events)
 * and bundles opened from disk.
 *
 * Role: the model behind the "Trace Captures" view, the export commands and the hot-lines
 * language server. Layer: extension, no `vscode` import (capturesView.ts shows it). It knows
 * the body of the `ptdebug/capture` event (docs/vscode.md) and nothing else of the adapter.
 */
import * as path from 'path';

/** Body of the `ptdebug/capture` DAP event: a recording window closed and was saved. */
export interface CaptureEventBody {
    /** The trace bundle directory (manifest.json inside). Required. */
    bundle: string;
    /** Adapter's id of the capture, unique in the session. */
    id?: string | number;
    /** 'complete' or 'partial' (the manifest's status). */
    status?: string;
    /** True when the capture ended before its window closed (the adapter's record breakpoints). */
    partial?: boolean;
    /** Why a partial capture stopped early. */
    partialReason?: string | null;
    /** Why the window closed ('the trigger function returned', 'instruction count', ...). */
    endReason?: string;
    /** The window, described ('from the breakpoint, at most 5000 instructions'). */
    window?: string;
    /** The recorded OS thread. */
    tid?: number;
    /** Where the trace was lost (history positions), if anywhere. */
    gaps?: Array<{ position: number; reason: string }>;
    /** What opened the window: 'breakpoint', 'command', ... */
    reason?: string;
    /** The thread (or goroutine) the window followed. */
    threadId?: number;
    /** Decoded instruction count, when known. */
    instructions?: number;
    /** Cycles in the window, when known. */
    cycles?: number;
    /** Window length in nanoseconds, when known. */
    durationNs?: number;
    /** Which clock `durationNs` and `cycles` come from: 'tsc' (the CPU's TSC and CYC cycles) or
     * 'stepper' (the ptrace stepper's wall-clock ns of a ptrace-slowed thread; its `cycles` are
     * those ns again). Absent from adapters before issue 35: shown as before, as cycles. */
    clock?: 'tsc' | 'stepper';
    /** The clock in words (the adapter's), for the tooltip. */
    clockLabel?: string;
    /** Source location where the window opened. */
    location?: { path?: string; line?: number };
}

export interface Capture extends CaptureEventBody {
    /** Unique key in the store. */
    key: string;
    /** Debug session name, or 'opened' for a bundle opened from disk. */
    origin: string;
    /** Order of arrival (1, 2, ...). */
    serial: number;
}

/** Checks an event body; returns the reason it is unusable, or undefined. */
export function invalidCaptureBody(body: unknown): string | undefined {
    if (typeof body !== 'object' || body === null) {
        return 'the event has no body';
    }
    const bundle = (body as { bundle?: unknown }).bundle;
    if (typeof bundle !== 'string' || bundle === '') {
        return 'the event body has no "bundle" path';
    }
    return undefined;
}

export class CaptureStore {
    private readonly captures: Capture[] = [];
    private serial = 0;
    private readonly listeners: Array<() => void> = [];

    /** Calls `listener` after every change. */
    onDidChange(listener: () => void): void {
        this.listeners.push(listener);
    }

    /** Adds a capture (a bundle already known is moved to the front, not duplicated). */
    add(origin: string, body: CaptureEventBody): Capture {
        const problem = invalidCaptureBody(body);
        if (problem) {
            throw new Error(`ptdebug/capture: ${problem}`);
        }
        const bundle = path.resolve(body.bundle);
        const existing = this.captures.findIndex(c => c.bundle === bundle);
        if (existing >= 0) {
            this.captures.splice(existing, 1);
        }
        this.serial += 1;
        const capture: Capture = { ...body, bundle, origin, serial: this.serial,
            key: `${origin}#${body.id ?? this.serial}#${bundle}` };
        this.captures.push(capture);
        this.changed();
        return capture;
    }

    /** Newest first. */
    list(): Capture[] {
        return [...this.captures].reverse();
    }

    latest(): Capture | undefined {
        return this.captures[this.captures.length - 1];
    }

    /** The distinct origins, in order of their newest capture. */
    origins(): string[] {
        const seen: string[] = [];
        for (const capture of this.list()) {
            if (!seen.includes(capture.origin)) {
                seen.push(capture.origin);
            }
        }
        return seen;
    }

    remove(key: string): void {
        const index = this.captures.findIndex(c => c.key === key);
        if (index >= 0) {
            this.captures.splice(index, 1);
            this.changed();
        }
    }

    private changed(): void {
        for (const listener of this.listeners) {
            listener();
        }
    }
}

/** One line describing a capture, for the tree view and quick picks. A stepper capture's time
 * is its one clock, stepper time, shown once (its "cycles" are the same ns, not CPU cycles). */
export function describeCapture(capture: Capture): string {
    const parts: string[] = [];
    if (capture.instructions !== undefined) {
        parts.push(`${formatCount(capture.instructions)} insns`);
    }
    if (capture.clock === 'stepper') {
        const ns = capture.durationNs ?? capture.cycles;
        if (ns !== undefined) {
            parts.push(`${formatDuration(ns)} stepper time (ptrace-slowed)`);
        }
    } else {
        if (capture.cycles !== undefined) {
            parts.push(`${formatCount(capture.cycles)} cycles`);
        }
        if (capture.durationNs !== undefined) {
            parts.push(formatDuration(capture.durationNs));
        }
    }
    if (capture.gaps && capture.gaps.length) {
        parts.push(`${capture.gaps.length} gap(s)`);
    }
    if (capture.status === 'partial' || capture.partial) {
        const why = capture.partialReason ?? capture.endReason;
        parts.push(`partial${why ? `: ${why}` : ''}`);
    }
    return parts.join(' · ');
}

/** The tree item's tooltip (Markdown): the description, the clock in words, window, end, bundle. */
export function captureTooltip(capture: Capture): string {
    return `**${captureLabel(capture)}**\n\n${describeCapture(capture)}` +
        `${capture.clockLabel ? `\n\nclock: ${capture.clockLabel}` : ''}` +
        `${capture.window ? `\n\nwindow: ${capture.window}` : ''}` +
        `${capture.endReason ? `\n\nended: ${capture.endReason}` : ''}\n\n\`${capture.bundle}\``;
}

export function captureLabel(capture: Capture): string {
    const where = capture.location?.path
        ? `${path.basename(capture.location.path)}${capture.location.line ? `:${capture.location.line}` : ''}`
        : capture.id !== undefined && capture.origin !== 'opened'
            ? `capture ${capture.id}${capture.tid !== undefined ? ` (thread ${capture.tid})` : ''}`
            : path.basename(capture.bundle);
    return capture.reason ? `${where} (${capture.reason})` : where;
}

export function formatCount(n: number): string {
    if (n >= 1e9) { return `${(n / 1e9).toFixed(1)}G`; }
    if (n >= 1e6) { return `${(n / 1e6).toFixed(1)}M`; }
    if (n >= 1e4) { return `${(n / 1e3).toFixed(1)}k`; }
    return String(n);
}

export function formatDuration(ns: number): string {
    if (ns >= 1e9) { return `${(ns / 1e9).toFixed(2)} s`; }
    if (ns >= 1e6) { return `${(ns / 1e6).toFixed(2)} ms`; }
    if (ns >= 1e3) { return `${(ns / 1e3).toFixed(1)} µs`; }
    return `${ns} ns`;
}

/** The argument of a hot-line lens's `ptdebug.showLine` command (adapter/lsp/server.py). */
export interface HotLineArgument {
    file: string;
    line: number;
    executions: number;
    instructions: number;
    cycles: number;
    /** Fraction of the window (of its cycles; of its instructions for the stepper). */
    share: number;
    /** "stepper": cycles are ptrace-slowed nanoseconds, not CPU cycles. */
    clock?: 'stepper' | 'tsc';
    bundle: string;
}

/** One sentence with a lens's exact numbers, shown when the lens is clicked. */
export function describeHotLine(arg: HotLineArgument): string {
    if (!arg || typeof arg.file !== 'string' || typeof arg.line !== 'number') {
        throw new Error('the lens has no {file, line} argument');
    }
    const share = `${(100 * (arg.share ?? 0)).toFixed(2)}% of the window`;
    const time = arg.clock === 'stepper'
        ? `${formatDuration(arg.cycles)} stepper time (ptrace-slowed, not CPU time)`
        : `${arg.cycles.toLocaleString('en-US')} cycles`;
    return `${path.basename(arg.file)}:${arg.line} ran ${arg.executions.toLocaleString('en-US')}× — ` +
        `${arg.instructions.toLocaleString('en-US')} instructions, ${time}, ${share} (capture ${arg.bundle})`;
}
