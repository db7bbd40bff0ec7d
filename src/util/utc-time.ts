// Times as text in UTC, computed with integer arithmetic: RFC 3339 (what
// Date.prototype.toISOString prints: log lines, metav1.Time) and HTTP's
// IMF-fixdate (toUTCString: a response's Date header). Why not Date's own:
// V8 sets up its date cache on the first date it formats, and with it ICU's
// time zone, whose code and data stay resident in a daemon that only ever
// prints UTC (~0.8 MiB of the executable's pages; docs/speed.md, "Dates
// without the time zone").

const pad = (n: number, width: number) => String(n).padStart(width, '0');
const WEEKDAYS = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const DAY_MS = 86_400_000;

interface Civil {
  year: number;
  /** 1-12 */
  month: number;
  day: number;
  /** 0 = Sunday */
  weekday: number;
  /** HH:MM:SS */
  clock: string;
  millis: number;
}

/** `ms` since the epoch as a date and time in UTC; undefined outside years 0-9999 (no clock's). */
function civil(ms: number): Civil | undefined {
  const t = Math.trunc(ms); // as Date's TimeClip: toward zero
  const days = Math.floor(t / DAY_MS);
  const inDay = t - days * DAY_MS;
  // Howard Hinnant's civil_from_days: eras of 400 years, each year from March 1st
  const z = days + 719_468;
  const era = Math.floor(z / 146_097);
  const dayOfEra = z - era * 146_097;
  const yearOfEra = Math.floor((dayOfEra - Math.floor(dayOfEra / 1460) + Math.floor(dayOfEra / 36_524) - Math.floor(dayOfEra / 146_096)) / 365);
  const dayOfYear = dayOfEra - (365 * yearOfEra + Math.floor(yearOfEra / 4) - Math.floor(yearOfEra / 100));
  const m = Math.floor((5 * dayOfYear + 2) / 153); // 0 = March
  const month = m < 10 ? m + 3 : m - 9;
  const year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0);
  if (!Number.isFinite(year) || year < 0 || year > 9999) return undefined;
  return {
    year,
    month,
    day: dayOfYear - Math.floor((153 * m + 2) / 5) + 1,
    weekday: (((days + 4) % 7) + 7) % 7, // 1970-01-01 was a Thursday
    clock: `${pad(Math.floor(inDay / 3_600_000), 2)}:${pad(Math.floor(inDay / 60_000) % 60, 2)}:${pad(Math.floor(inDay / 1000) % 60, 2)}`,
    millis: inDay % 1000,
  };
}

/** YYYY-MM-DDTHH:MM:SS.mmmZ, as toISOString (which it falls back to outside years 0-9999, throwing for what is no time). */
export function utcIso(ms: number): string {
  const c = civil(ms);
  if (!c) return new Date(ms).toISOString();
  return `${pad(c.year, 4)}-${pad(c.month, 2)}-${pad(c.day, 2)}T${c.clock}.${pad(c.millis, 3)}Z`;
}

/** IMF-fixdate (RFC 9110), e.g. "Sun, 06 Nov 1994 08:49:37 GMT", as toUTCString (its fallback, as utcIso's). */
export function httpDate(ms: number): string {
  const c = civil(ms);
  if (!c) return new Date(ms).toUTCString();
  return `${WEEKDAYS[c.weekday]}, ${pad(c.day, 2)} ${MONTHS[c.month - 1]} ${pad(c.year, 4)} ${c.clock} GMT`;
}
