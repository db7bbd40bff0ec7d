// `vxlan-flannel status`'s text (formatStatus): a VXLAN peer's three entries,
// a DirectRouting peer's route alone. (What collectStatus reads from the
// kernel is run in flannel-etcd.test.ts and flannel-ipv6.test.ts.)
import { describe, expect, it } from 'vitest';
import { formatStatus, type StatusReport } from '../../../../src/flannel/commands/status';

describe('formatStatus', () => {
  it('a direct peer shows "-" for neighbour and FDB and its route marked (direct)', () => {
    const report: StatusReport = {
      store: 'file store /x',
      network: { backend: 'vxlan', network: '10.88.0.0/16', subnetLen: 24, vni: 1, port: 8472 },
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
      notes: [],
    };
    const lines = formatStatus(report).split('\n');
    expect(lines.find((l) => l.includes('10.88.2.0/24'))).toMatch(/ 0a:00:00:00:00:02 +- +- +ok \(direct\)$/);
    expect(lines.find((l) => l.includes('10.88.3.0/24'))).toMatch(/ 0a:00:00:00:00:03 +ok +MISSING +ok$/);
    expect(lines.find((l) => l.includes('10.88.4.0/24'))).toMatch(/ +- +- +MISSING \(direct\)$/);
    expect(lines.at(-2)).toBe('state:   DEGRADED (2 problems)');
  });

  it('host-gw: no VTEP, each peer with its route (ok, and the kernel\'s route; MISSING when another gateway)', () => {
    const report: StatusReport = {
      store: 'file store /x',
      network: { backend: 'host-gw', network: '10.88.0.0/16', subnetLen: 24 },
      lease: { subnet: '10.88.1.0/24', publicIP: '192.168.88.1', inStore: true },
      peers: [
        { node: 'n2', subnet: '10.88.2.0/24', publicIP: '192.168.88.2', route: true, via: 'via 192.168.88.2 dev eth0' },
        { node: 'n3', subnet: '10.88.3.0/24', publicIP: '192.168.88.3', route: false, via: 'via 192.168.88.9 dev eth0' },
        { subnet: '10.88.4.0/24', publicIP: '192.168.88.4', route: false },
      ],
      ipv6Peers: [],
      ignored: ['lease 10.88.5.0/24: backend "vxlan" is not host-gw'],
      problems: ['peer 10.88.3.0/24: route via 192.168.88.3 missing or wrong', 'peer 10.88.4.0/24: route via 192.168.88.4 missing or wrong'],
      notes: [],
    };
    const lines = formatStatus(report).split('\n');
    expect(lines).toContain('network: 10.88.0.0/16 (/24 per node), backend host-gw');
    expect(lines.find((l) => l.includes('SUBNET'))).toMatch(/^  NODE +SUBNET +PUBLIC IP +ROUTE$/);
    expect(lines.find((l) => l.includes('10.88.2.0/24'))).toMatch(/^  n2 +10\.88\.2\.0\/24 +192\.168\.88\.2 +ok \(via 192\.168\.88\.2 dev eth0\)$/);
    expect(lines.find((l) => l.includes('10.88.3.0/24'))).toMatch(/ +MISSING \(via 192\.168\.88\.9 dev eth0\)$/);
    expect(lines.find((l) => l.includes('10.88.4.0/24'))).toMatch(/^  - +10\.88\.4\.0\/24 +192\.168\.88\.4 +MISSING$/);
    expect(lines).toContain('ignored: lease 10.88.5.0/24: backend "vxlan" is not host-gw');
    expect(lines.some((l) => l.startsWith('VTEP'))).toBe(false);
  });
});
