/**
 * The added-latency chart, written by hand as SVG (no chart library): grouped bars per percentile, one bar
 * per proxy, on a log scale because Portkey's figures are one to two orders of magnitude above the others.
 * Every bar carries its value as text, so the scale never has to be read off.
 */
import { formatMs } from './stats.js'

export interface Series {
  readonly name: string
  readonly color: string
  /** Added milliseconds per group; NaN for "not measured". */
  readonly values: readonly number[]
}

const W = 760
const H = 420
const M = { top: 64, right: 24, bottom: 72, left: 72 }

/** Axis labels at powers of ten: 10 µs, 100 µs, 1 ms, 10 ms, 1 s. */
function decade(p: number): string {
  if (p >= 3) return `${10 ** (p - 3)} s`
  if (p >= 0) return `${10 ** p} ms`
  return `${Math.round(10 ** (p + 3))} µs`
}

function esc(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
}

export function addedLatencySvg(title: string, subtitle: string, groups: readonly string[], series: readonly Series[]): string {
  const positive = series.flatMap((s) => s.values).filter((v) => Number.isFinite(v) && v > 0)
  const lo = Math.floor(Math.log10(positive.length > 0 ? Math.min(...positive) : 0.01))
  const hi = Math.max(lo + 1, Math.ceil(Math.log10(positive.length > 0 ? Math.max(...positive) : 1)))
  const plotW = W - M.left - M.right
  const plotH = H - M.top - M.bottom
  const y = (ms: number): number => M.top + plotH - ((Math.log10(ms) - lo) / (hi - lo)) * plotH
  const groupW = plotW / groups.length
  const barW = Math.min(48, (groupW * 0.8) / Math.max(1, series.length))

  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="Helvetica, Arial, sans-serif">`,
    `<rect width="${W}" height="${H}" fill="#ffffff"/>`,
    `<text x="${W / 2}" y="26" text-anchor="middle" font-size="16" font-weight="bold">${esc(title)}</text>`,
    `<text x="${W / 2}" y="46" text-anchor="middle" font-size="12" fill="#555">${esc(subtitle)}</text>`,
  ]
  for (let p = lo; p <= hi; p++) {
    const yy = y(10 ** p)
    out.push(`<line x1="${M.left}" x2="${W - M.right}" y1="${yy.toFixed(1)}" y2="${yy.toFixed(1)}" stroke="#ddd"/>`)
    out.push(`<text x="${M.left - 8}" y="${(yy + 4).toFixed(1)}" text-anchor="end" font-size="11" fill="#333">${esc(decade(p))}</text>`)
  }
  out.push(`<line x1="${M.left}" x2="${M.left}" y1="${M.top}" y2="${M.top + plotH}" stroke="#333"/>`)
  out.push(`<line x1="${M.left}" x2="${W - M.right}" y1="${M.top + plotH}" y2="${M.top + plotH}" stroke="#333"/>`)
  out.push(`<text transform="translate(18 ${M.top + plotH / 2}) rotate(-90)" text-anchor="middle" font-size="12">added latency over direct (log scale)</text>`)

  groups.forEach((group, g) => {
    const x0 = M.left + g * groupW + (groupW - barW * series.length) / 2
    out.push(`<text x="${(M.left + (g + 0.5) * groupW).toFixed(1)}" y="${M.top + plotH + 20}" text-anchor="middle" font-size="13">${esc(group)}</text>`)
    series.forEach((s, k) => {
      const v = s.values[g] ?? Number.NaN
      const x = x0 + k * barW
      const cx = (x + barW / 2).toFixed(1)
      if (!Number.isFinite(v)) {
        out.push(`<text x="${cx}" y="${M.top + plotH - 6}" text-anchor="middle" font-size="10" fill="#999">n/a</text>`)
        return
      }
      if (v <= 0) {
        // Not slower than direct within the noise of this run: no bar to draw on a log scale.
        out.push(`<text x="${cx}" y="${M.top + plotH - 6}" text-anchor="middle" font-size="10" fill="${s.color}">≤0</text>`)
        return
      }
      const top = Math.max(M.top, y(v))
      out.push(`<rect x="${(x + 2).toFixed(1)}" y="${top.toFixed(1)}" width="${(barW - 4).toFixed(1)}" height="${(M.top + plotH - top).toFixed(1)}" fill="${s.color}"/>`)
      out.push(`<text x="${cx}" y="${(top - 4).toFixed(1)}" text-anchor="middle" font-size="10" fill="#222">${esc(formatMs(v))}</text>`)
    })
  })

  // The legend flows into centred rows (six series with long names do not fit one): each entry's width is
  // estimated from its name at about 6.6 px a character of 12 px Helvetica.
  const width = (s: Series): number => 18 + Math.ceil(s.name.length * 6.6) + 16
  const rows: Series[][] = [[]]
  let used = 0
  for (const s of series) {
    if (used > 0 && used + width(s) > W - 2 * 16) {
      rows.push([])
      used = 0
    }
    rows[rows.length - 1]!.push(s)
    used += width(s)
  }
  rows.forEach((row, r) => {
    const legendY = H - 8 - (rows.length - 1 - r) * 20
    let x = W / 2 - row.reduce((sum, s) => sum + width(s), 0) / 2
    for (const s of row) {
      out.push(`<rect x="${x.toFixed(1)}" y="${legendY - 10}" width="12" height="12" fill="${s.color}"/>`)
      out.push(`<text x="${(x + 18).toFixed(1)}" y="${legendY}" font-size="12">${esc(s.name)}</text>`)
      x += width(s)
    }
  })
  out.push('</svg>')
  return out.join('\n') + '\n'
}
