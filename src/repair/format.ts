// How `host-local repair` prints its report: the attachments released (a
// table, or a JSON array of the same objects) and one summary line with what
// was kept and which plugins could not be sent GC.
import { formatTable } from '../util/table';
import type { RepairReport } from './repair';

export function formatReleased(report: RepairReport): string {
  if (report.released.length === 0) return '';
  return formatTable(
    ['NETWORK', 'CONTAINER', 'IFNAME', 'ADDRESSES'],
    report.released.map((r) => [r.network, r.containerID || '(torn file)', r.ifname || '-', r.addresses.join(',') || '-']),
  );
}

/** "released 2 attachments; kept 5 (4 of live sandboxes, 1 newer than 5m); not sent GC: net/portmap (no CNI 1.1.0)". */
export function formatSummary(report: RepairReport, o: { dryRun: boolean; minAge: string }): string {
  const n = report.released.length;
  const parts = [n === 0 ? 'nothing to release' : `${o.dryRun ? 'would release' : 'released'} ${plural(n, 'attachment')}`];
  const kept = report.keptLive + report.keptYoung + report.keptParked;
  if (kept > 0) {
    const why = [
      report.keptLive && `${report.keptLive} of live sandboxes`,
      report.keptYoung && `${report.keptYoung} newer than ${o.minAge}`,
      report.keptParked && `${report.keptParked} parked`,
    ].filter(Boolean);
    parts.push(`kept ${kept} (${why.join(', ')})`);
  }
  if (report.skipped.length > 0) {
    parts.push(`not sent GC (no CNI 1.1.0): ${report.skipped.map((s) => `${s.network}/${s.type}`).join(', ')}`);
  }
  if (o.dryRun) parts.push('dry run: nothing was changed');
  return parts.join('; ') + '\n';
}

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;
