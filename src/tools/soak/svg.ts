// The soak's picture: one panel per figure (and one for the backlog), a line per
// role over the run's minutes. Hand-written SVG, readable in any browser or README.

import { BACKLOG, FIGURES, type Figure, type Sample } from './samples.js';

const TITLES: Record<Figure, [string, number]> = {
  rssBytes: ['RSS, MB', 2 ** 20],
  heapUsedBytes: ['heap used, MB', 2 ** 20],
  loopDelayP99Ms: ['event-loop delay p99, ms', 1],
  openFds: ['open file descriptors', 1],
  dbConnections: ['database connections', 1],
};
const COLOURS = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b'];
const W = 460;
const H = 170;
const PAD = { left: 50, top: 24, right: 12, bottom: 22 };

type Series = { name: string; points: [number, number | null][] };

export function renderSvg(samples: readonly Sample[], roles: readonly string[], title: string): string {
  const panels: { title: string; series: Series[] }[] = FIGURES.map((f) => ({
    title: TITLES[f][0],
    series: roles.map((r) => ({
      name: r,
      points: samples.map((s) => [s.atMs / 60_000, scaled(s.roles[r]?.[f], TITLES[f][1])] as [number, number | null]),
    })),
  }));
  panels.push({
    title: 'backlog (rows)',
    series: BACKLOG.map((b) => ({ name: b, points: samples.map((s) => [s.atMs / 60_000, s.backlog[b]]) })),
  });
  const cols = 2;
  const width = cols * W;
  const height = 30 + Math.ceil(panels.length / cols) * H;
  const body = panels.map((p, i) => panel(p.title, p.series, (i % cols) * W, 30 + Math.floor(i / cols) * H));
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="10">`,
    // Read aloud in place of the picture.
    `<title>${xmlText(title)}</title>`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${PAD.left}" y="18" font-size="13">${xmlText(title)}</text>`,
    ...body,
    '</svg>',
    '',
  ].join('\n');
}

function panel(title: string, series: Series[], x0: number, y0: number): string {
  const xs = series.flatMap((s) => s.points.map(([x]) => x));
  const ys = series.flatMap((s) => s.points.map(([, y]) => y).filter((y): y is number => y !== null));
  const xMax = Math.max(1e-9, ...xs);
  const yMax = niceCeiling(Math.max(0, ...ys));
  const pw = W - PAD.left - PAD.right;
  const ph = H - PAD.top - PAD.bottom;
  const px = (x: number) => (x0 + PAD.left + (x / xMax) * pw).toFixed(1);
  const py = (y: number) => (y0 + PAD.top + ph - (yMax > 0 ? (y / yMax) * ph : 0)).toFixed(1);
  const out = [
    `<g><text x="${x0 + PAD.left}" y="${y0 + 14}" font-size="11" font-weight="bold">${xmlText(title)}</text>`,
    `<rect x="${x0 + PAD.left}" y="${y0 + PAD.top}" width="${pw}" height="${ph}" fill="none" stroke="#bbb"/>`,
    `<text x="${x0 + PAD.left - 4}" y="${py(yMax)}" text-anchor="end" dy="3">${round(yMax)}</text>`,
    `<text x="${x0 + PAD.left - 4}" y="${py(0)}" text-anchor="end" dy="3">0</text>`,
    `<text x="${px(xMax)}" y="${y0 + H - 8}" text-anchor="end">${round(xMax)} min</text>`,
  ];
  series.forEach((s, i) => {
    const colour = COLOURS[i % COLOURS.length];
    // A gap (a process restarting) breaks the line rather than bridging it.
    const runs: string[][] = [[]];
    for (const [x, y] of s.points) {
      if (y === null) runs.push([]);
      else runs.at(-1)!.push(`${px(x)},${py(y)}`);
    }
    for (const pts of runs.filter((r) => r.length > 0))
      out.push(`<polyline fill="none" stroke="${colour}" stroke-width="1.5" points="${pts.join(' ')}"/>`);
    out.push(
      `<text x="${x0 + W - PAD.right - 4}" y="${y0 + PAD.top + 12 + i * 11}" text-anchor="end" fill="${colour}">${xmlText(s.name)}</text>`,
    );
  });
  out.push('</g>');
  return out.join('\n');
}

const scaled = (v: number | null | undefined, unit: number) => (typeof v === 'number' ? v / unit : null);
const round = (v: number) => (v >= 10 ? Math.round(v) : Math.round(v * 10) / 10);
const xmlText = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;');

function niceCeiling(v: number): number {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 2.5, 5, 10].map((m) => m * p).find((c) => c >= v)!;
}
