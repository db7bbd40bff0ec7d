// `vxlan-flannel status`'s text (formatStatus): a VXLAN peer's three entries,
// a DirectRouting peer's route alone. (What collectStatus reads from the
// kernel is run in flannel-etcd.test.ts and flannel-ipv6.test.ts.)
import { describe, expect, it } from 'vitest';
import { formatStatus, type StatusReport } from '../../../../src/flannel/commands/status';

describe('formatStatus', () => {
  it('a direct peer shows "-" for neighbour and FDB and its route marked (direct)', () => {
    const report: StatusReport = {
      store: 'file store /x',
      network: { network: '10.88.0.0/16', subnetLen: 24, vni: 1, port: 8472 },
      lease: { subnet: '10.88.1.0/24', publicIP: '192.168.88.1', vtepMAC: '0a:00:00:00:00:01', inStore: true },
      vtep: { name: 'flannel.1', present: true, up: true, mtu: 1450, mac: '0a:00:00:00:00:01', address: true },
      peers: [
        { subnet: '10.88.2.0/24', publicIP: '192.168.88.2', vtepMAC: '0a:00:00:00:00:02', direct: true, route: true },
        { subnet: '10.88.3.0/24', publicIP: '192.168.99.3', vtepMAC: '0a:00:00:00:00:03', neigh: true, fdb: false, route: true },
        { subnet: '10.88.4.0/24', publicIP: '192.168.88.4', vtepMAC: '0a:00:00:00:00:04', direct: true, route: false },
      ],
      ipv6Peers: [],
      ignored: [],
      problems: ['peer 10.88.3.0/24: fdb missing or wrong', 'peer 10.88.4.0/24: direct route missing or wrong'],
    };
    const lines = formatStatus(report).split('\n');
    expect(lines.find((l) => l.includes('10.88.2.0/24'))).toMatch(/ 0a:00:00:00:00:02 +- +- +ok \(direct\)$/);
    expect(lines.find((l) => l.includes('10.88.3.0/24'))).toMatch(/ 0a:00:00:00:00:03 +ok +MISSING +ok$/);
    expect(lines.find((l) => l.includes('10.88.4.0/24'))).toMatch(/ +- +- +MISSING \(direct\)$/);
    expect(lines.at(-2)).toBe('state:   DEGRADED (2 problems)');
  });
});
