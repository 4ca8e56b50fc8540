/** The captures model behind the tree view (src/captureModel.ts) and the history text. */
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { CaptureStore, captureLabel, captureTooltip, describeCapture, invalidCaptureBody } from '../src/captureModel';
import { renderGoroutineHistory } from '../src/historyText';

test('captures are listed newest first, grouped by origin, never duplicated by bundle', () => {
    const store = new CaptureStore();
    let changes = 0;
    store.onDidChange(() => { changes += 1; });
    store.add('session A', { bundle: '/tmp/b1', id: 1, reason: 'breakpoint', location: { path: '/ws/app.py', line: 12 } });
    store.add('session A', { bundle: '/tmp/b2', id: 2 });
    store.add('opened', { bundle: '/tmp/b3' });
    store.add('session A', { bundle: '/tmp/b1/', id: 1, instructions: 5 });
    assert.equal(changes, 4);
    assert.deepEqual(store.list().map(c => c.bundle), ['/tmp/b1', '/tmp/b3', '/tmp/b2']);
    assert.equal(store.latest()?.instructions, 5);
    assert.deepEqual(store.origins(), ['session A', 'opened']);
    store.remove(store.latest()!.key);
    assert.equal(store.list().length, 2);
});

test('an event without a bundle path is rejected with the reason', () => {
    assert.equal(invalidCaptureBody(undefined), 'the event has no body');
    assert.equal(invalidCaptureBody({ id: 3 }), 'the event body has no "bundle" path');
    assert.equal(invalidCaptureBody({ bundle: '/x' }), undefined);
    assert.throws(() => new CaptureStore().add('s', { bundle: '' }), /no "bundle" path/);
});

test('labels and descriptions say where, how much and whether it is partial', () => {
    const store = new CaptureStore();
    const c = store.add('s', { bundle: '/tmp/cap-7', reason: 'breakpoint', location: { path: '/ws/svc.go', line: 40 },
        instructions: 123456, cycles: 2_500_000, durationNs: 1_500_000, status: 'partial', partialReason: 'target exited' });
    assert.equal(captureLabel(c), 'svc.go:40 (breakpoint)');
    assert.equal(describeCapture(c), '123.5k insns · 2.5M cycles · 1.50 ms · partial: target exited');
    assert.equal(captureLabel(store.add('s', { bundle: '/tmp/cap-8' })), 'cap-8');
});

test('the adapter record breakpoints\' event body (id, tid, window, gaps, partial) reads well', () => {
    const store = new CaptureStore();
    const c = store.add('session', { bundle: '/tmp/ptdebug-x/capture-3', id: 3, tid: 4242, threadId: 1,
        window: 'from the breakpoint, at most 5000 instructions', instructions: 5000, cycles: 1234,
        durationNs: 2_000_000, gaps: [{ position: 10, reason: 'overflow' }], endReason: 'the thread exited',
        partial: true });
    assert.equal(captureLabel(c), 'capture 3 (thread 4242)');
    assert.equal(describeCapture(c), '5000 insns · 1234 cycles · 2.00 ms · 1 gap(s) · partial: the thread exited');
    assert.equal(captureLabel(store.add('opened', { bundle: '/data/b7', id: 9 })), 'b7');
});

test('a stepper capture\'s time is labelled stepper time, never cycles (issue 35)', () => {
    // Seen: "21.5k insns · 349.1M cycles" for a ptrace-stepper capture, whose cycles are the
    // wall-clock ns of a ptrace-slowed thread. The event's `clock` says so; the view follows it.
    const store = new CaptureStore();
    const stepper = store.add('s', { bundle: '/tmp/cap-s', instructions: 21_500, cycles: 349_132_618,
        durationNs: 349_132_618, clock: 'stepper',
        clockLabel: 'stepper time: wall-clock ns of a thread slowed by ptrace, not CPU time; its cycles are those ns' });
    assert.equal(describeCapture(stepper), '21.5k insns · 349.13 ms stepper time (ptrace-slowed)');
    assert.doesNotMatch(describeCapture(stepper), /cycles/);
    assert.match(captureTooltip(stepper), /clock: stepper time: wall-clock ns of a thread slowed by ptrace/);
    const cpu = store.add('s', { bundle: '/tmp/cap-t', instructions: 21_500, cycles: 349_132_618,
        durationNs: 120_000_000, clock: 'tsc', clockLabel: 'CPU time: TSC; cycles from CYC packets' });
    assert.equal(describeCapture(cpu), '21.5k insns · 349.1M cycles · 120.00 ms');
    assert.match(captureTooltip(cpu), /clock: CPU time: TSC; cycles from CYC packets/);
});

test('goroutine history (GoroutineHistoryOut) renders busiest first, ranges from the window start', () => {
    const text = renderGoroutineHistory({ timeUnit: 'ns', goroutines: [
        { thread: 101, goid: 7, instructions: 50, time: 3000, cycles: 10, confidence: 'flow',
          ranges: [{ start: 0, stop: 50, startTime: 2000, stopTime: 5000 }] },
        { thread: 100, goid: 0, instructions: 400, time: 500, cycles: 900, confidence: 'observed', truncated: true,
          ranges: [{ start: 10, stop: 410, startTime: 1000, stopTime: 1500 }] },
    ] }, '/tmp/cap');
    const lines = text.split('\n');
    assert.ok(lines.indexOf('## g0 (scheduler, system stack) on thread 100') < lines.indexOf('## goroutine 7 on thread 101'));
    assert.ok(lines.includes('400 instructions, 900 cycles, 500 ns in 1+ range(s); confidence: observed'));
    assert.ok(lines.some(l => l.startsWith('  +1.0 µs') && l.endsWith('instructions 0..49')));
    assert.ok(lines.includes('  ... more range(s) not shown'));
    assert.ok(renderGoroutineHistory({ timeUnit: 'tsc', goroutines: [
        { thread: 1, goid: -1, instructions: 1, time: 20000, cycles: 1, confidence: 'unknown', ranges: [] }] })
        .includes('unknown goroutine (before any goid was seen) on thread 1'));
    assert.throws(() => renderGoroutineHistory({} as never), /no "goroutines" array/);
});
