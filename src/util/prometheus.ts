// The Prometheus text exposition format 0.0.4, as far as the daemon's
// /metrics needs it: a metric family's HELP, TYPE and samples, and
// histograms.

export type Labels = Record<string, string>;
export type Sample = [name: string, labels: Labels, value: number];

const escape = (v: string) => v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
const labelText = (l: Labels) => {
  const keys = Object.keys(l);
  return keys.length ? `{${keys.map((k) => `${k}="${escape(l[k])}"`).join(',')}}` : '';
};
const num = (v: number) => (Number.isFinite(v) ? String(v) : v > 0 ? '+Inf' : v < 0 ? '-Inf' : 'NaN');

/** One metric family's lines: HELP, TYPE and its samples. */
export function family(name: string, type: 'gauge' | 'counter' | 'histogram', help: string, samples: Sample[]): string {
  return [`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`, ...samples.map(([n, l, v]) => `${n}${labelText(l)} ${num(v)}`)].join('\n');
}

/** Upper bounds of duration buckets, in seconds. */
export const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** A histogram's counts. */
export class Histogram {
  readonly counts: number[];
  sum = 0;
  count = 0;

  constructor(readonly buckets: readonly number[] = DURATION_BUCKETS) {
    this.counts = buckets.map(() => 0);
  }

  observe(v: number): void {
    this.buckets.forEach((le, i) => v <= le && this.counts[i]++);
    this.sum += v;
    this.count++;
  }

  /** Its samples as `name`_bucket, _sum and _count, with `labels` on each. */
  samples(name: string, labels: Labels): Sample[] {
    return [
      ...this.buckets.map((le, i): Sample => [`${name}_bucket`, { ...labels, le: String(le) }, this.counts[i]]),
      [`${name}_bucket`, { ...labels, le: '+Inf' }, this.count],
      [`${name}_sum`, labels, this.sum],
      [`${name}_count`, labels, this.count],
    ];
  }
}
