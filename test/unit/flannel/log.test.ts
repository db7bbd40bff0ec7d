// The daemon's log helpers: printable() and the Reporter that logs a
// recurring condition when it appears, changes and ends, not on every pass.
import { describe, expect, it } from 'vitest';
import { Reporter, printable } from '../../../src/flannel/log';

describe('printable', () => {
  it('escapes control characters and the Unicode line separators, nothing else', () => {
    expect(printable('a\nb\r\u2028c\u0000 é\t"')).toBe('a\\u000ab\\u000d\\u2028c\\u0000 é\\u0009"');
    expect(printable(printable('x\ny'))).toBe('x\\u000ay'); // escaping twice changes nothing
  });
});

describe('Reporter', () => {
  const make = () => {
    const lines: string[] = [];
    return { lines, r: new Reporter((m) => lines.push(m)) };
  };

  it('logs a condition once while its message stays the same, again when it changes', () => {
    const { lines, r } = make();
    for (let i = 0; i < 3; i++) r.report('vtep flannel.1', 'cannot make flannel.1: busy');
    r.report('vtep flannel.1', 'cannot make flannel.1: gone');
    r.report('vtep flannel.1', 'cannot make flannel.1: busy'); // back to the first message: a change too
    expect(lines).toEqual(['cannot make flannel.1: busy', 'cannot make flannel.1: gone', 'cannot make flannel.1: busy']);
  });

  it('keys are independent', () => {
    const { lines, r } = make();
    r.report('a', 'same text');
    r.report('b', 'same text');
    r.report('a', 'same text');
    expect(lines).toEqual(['same text', 'same text']);
  });

  it('clear logs the recovery only when the condition had been reported, and makes the next report log again', () => {
    const { lines, r } = make();
    r.clear('peers', 'every peer is programmed again'); // never reported: silent
    r.report('peers', 'route refused');
    r.clear('peers', 'every peer is programmed again');
    r.clear('peers', 'every peer is programmed again'); // already over: silent
    r.report('peers', 'route refused');
    r.clear('other');
    expect(lines).toEqual(['route refused', 'every peer is programmed again', 'route refused']);
  });

  it('clearAll forgets every condition and says whether there was one', () => {
    const { lines, r } = make();
    expect(r.clearAll()).toBe(false);
    r.report('x', 'watch: unreachable');
    r.report('y', 'watch: stream ended');
    expect(r.clearAll()).toBe(true);
    expect(r.clearAll()).toBe(false);
    r.report('x', 'watch: unreachable');
    expect(lines).toEqual(['watch: unreachable', 'watch: stream ended', 'watch: unreachable']);
  });
});
