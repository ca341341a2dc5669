// Overview: balance and funds, usage over time as an inline SVG chart, and usage by model and by key.
import { api, h, table } from './api.js'

const SVG = 'http://www.w3.org/2000/svg'

function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag)
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v))
  for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)))
  return el
}

function stat(label, value, id) {
  return h('div', { class: 'stat' }, h('div', { class: 'label' }, label), h('div', { class: 'value', 'data-testid': id }, value))
}

/** Every day from start to end (YYYY-MM-DD), so days without usage show as zero. */
function days(start, end) {
  const out = []
  for (let d = Date.parse(`${start}T00:00:00Z`); d <= Date.parse(`${end}T00:00:00Z`); d += 86_400_000) out.push(new Date(d).toISOString().slice(0, 10))
  return out
}

/** A bar chart of `metric` per day, with a text alternative (the same numbers as a table follow it). */
export function usageChart(stats, metric) {
  const byDay = new Map(stats.by_day.map((d) => [d.date, Number(d[metric])]))
  const all = days(stats.start_date, stats.end_date)
  const values = all.map((d) => byDay.get(d) ?? 0)
  const max = Math.max(...values, 0)
  const W = 600, H = 200, left = 48, bottom = 24, top = 8
  const bw = (W - left) / Math.max(values.length, 1)
  const total = values.reduce((a, b) => a + b, 0)
  const svg = s('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `${metric} per day from ${stats.start_date} to ${stats.end_date}: ${total} in all, at most ${max} in a day` })
  svg.append(s('line', { class: 'axis', x1: left, y1: H - bottom, x2: W, y2: H - bottom }))
  svg.append(s('line', { class: 'axis', x1: left, y1: top, x2: left, y2: H - bottom }))
  svg.append(s('text', { x: left - 4, y: top + 8, 'text-anchor': 'end' }, max === 0 ? '0' : String(+max.toPrecision(4))))
  svg.append(s('text', { x: left - 4, y: H - bottom, 'text-anchor': 'end' }, '0'))
  values.forEach((v, i) => {
    const bh = max === 0 ? 0 : ((H - bottom - top) * v) / max
    const bar = s('rect', { class: 'bar', x: left + i * bw + 1, y: H - bottom - bh, width: Math.max(bw - 2, 1), height: bh })
    bar.append(s('title', {}, `${all[i]}: ${v}`))
    svg.append(bar)
  })
  const every = Math.max(1, Math.ceil(values.length / 6))
  all.forEach((d, i) => {
    if (i % every === 0) svg.append(s('text', { x: left + i * bw + bw / 2, y: H - 8, 'text-anchor': 'middle' }, d.slice(5)))
  })
  return svg
}

export async function renderOverview(view) {
  const [balance, funds, stats, keys] = await Promise.all([
    api('GET', '/v1/account/balance'),
    api('GET', '/v1/account/funds'),
    api('GET', '/v1/account/usage/stats'),
    api('GET', '/v1/api-keys'),
  ])
  const names = new Map(keys.data.map((k) => [k.key_id, `${k.name} (${k.key_preview})`]))
  const chartBox = h('div', { 'data-testid': 'usage-chart' })
  let metric = 'requests'
  const draw = () => chartBox.replaceChildren(usageChart(stats, metric))
  draw()
  const select = h('select', { id: 'usage-metric', onchange: (e) => { metric = e.target.value; draw() } },
    h('option', { value: 'requests' }, 'Requests'),
    h('option', { value: 'total_tokens' }, 'Tokens'),
    h('option', { value: 'spend' }, 'Spend (USD)'))
  const metrics = (m) => [
    h('td', { class: 'num' }, m.requests), h('td', { class: 'num' }, m.prompt_tokens), h('td', { class: 'num' }, m.completion_tokens),
    h('td', { class: 'num' }, m.images), h('td', { class: 'num' }, m.spend),
  ]
  const cols = [{ label: 'Requests', num: true }, { label: 'Prompt tokens', num: true }, { label: 'Completion tokens', num: true },
    { label: 'Images', num: true }, { label: 'Spend (USD)', num: true }]

  view.replaceChildren(
    h('section', { class: 'card', 'aria-labelledby': 'balance-title' },
      h('h2', { id: 'balance-title' }, 'Balance and funds'),
      h('div', { class: 'grid' },
        stat('Total balance (USD)', balance.total_balance, 'total-balance'),
        stat('Deposits left', balance.deposit_balance, 'deposit-balance'),
        stat('Credits left', balance.credit_balance, 'credit-balance'),
        stat('Reserved by requests in flight', funds.reserved, 'reserved'),
        stat('Spent', funds.spent, 'spent'),
        stat('Available', funds.available, 'available'))),
    h('section', { class: 'card', 'aria-labelledby': 'usage-title' },
      h('h2', { id: 'usage-title' }, `Usage, ${stats.start_date} to ${stats.end_date}`),
      h('p', {}, h('span', { 'data-testid': 'usage-requests' }, `${stats.totals.requests} requests`), `, ${stats.totals.total_tokens} tokens, ${stats.totals.spend} USD spent.`),
      h('label', {}, 'Chart', select),
      chartBox,
      table('By model', [{ label: 'Model' }, ...cols], stats.by_model.map((m) => h('tr', {}, h('td', { class: 'mono' }, m.model), metrics(m)))),
      table('By API key', [{ label: 'Key' }, ...cols], stats.by_key.map((m) => h('tr', {}, h('td', {}, names.get(m.api_key_id) ?? m.api_key_id), metrics(m))))),
  )
}
