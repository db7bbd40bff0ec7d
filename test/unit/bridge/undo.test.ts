// ADD's rollback: newest step first, cancelled steps skipped, a failing step
// reported without stopping the others.
import { describe, expect, it } from 'vitest';
import { Undo } from '../../../src/bridge/undo';

describe('Undo', () => {
  it('runs steps newest first, skips cancelled ones, reports failures and goes on', async () => {
    const undo = new Undo();
    const ran: string[] = [];
    undo.push(async () => ran.push('ipam'));
    const veth = undo.push(async () => ran.push('veth'));
    undo.push(async () => {
      throw new Error('masq gone');
    });
    undo.push(async () => ran.push('spoofchk'));
    veth.cancel();
    const reported: string[] = [];
    await undo.rollback((e) => reported.push(e.message));
    expect(ran).toEqual(['spoofchk', 'ipam']);
    expect(reported).toEqual(['masq gone']);
    // a second rollback has nothing left to run
    await undo.rollback((e) => reported.push(e.message));
    expect(ran).toEqual(['spoofchk', 'ipam']);
  });
});
