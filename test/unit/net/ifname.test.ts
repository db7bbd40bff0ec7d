import { describe, expect, it } from 'vitest';
import { ifnameProblem, linkNameProblem } from '../../../src/net/ifname';
import { isBatchSafe } from '../../../src/iproute/batch';

describe('interface names', () => {
  it.each(['eth0', 'veth1234abcd', 'flannel.1', 'a'.repeat(15)])('accepts %j', (name) => {
    expect(ifnameProblem(name)).toBeUndefined();
    expect(linkNameProblem(name)).toBeUndefined();
  });

  // NUL ends a line of `ip -batch`: "eth0\0x" would act on eth0
  it.each(['eth0\u0000x', 'eth\u0001', 'a\u001fb', 'del\u007f', 'eth0\u001b[31m'])('refuses the control characters in %j', (name) => {
    expect(ifnameProblem(name)).toBe('it contains a control character');
    expect(linkNameProblem(name)).toBe('it contains a control character');
  });

  it('a batch word with a control character is unsafe', () => {
    expect(isBatchSafe(['link', 'del', 'eth0'])).toBe(true);
    for (const c of ['\u0000', '\u0001', '\u001f', '\u007f']) expect(isBatchSafe(['link', 'del', `eth0${c}x`]), JSON.stringify(c)).toBe(false);
  });
});
