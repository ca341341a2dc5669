// The live catalog: every model with the providers that serve it, their trust tier, health and prices.
import { api, h, table } from './api.js'

function price(p) {
  const parts = []
  if (p.prompt !== null) parts.push(`${p.prompt} in`)
  if (p.completion !== null) parts.push(`${p.completion} out /1M tok`)
  if (p.image !== null) parts.push(`${p.image} /image`)
  if (p.audio_second !== null) parts.push(`${p.audio_second} /s audio`)
  return parts.length === 0 ? '–' : parts.join(', ')
}

export async function renderCatalog(view) {
  const models = await api('GET', '/v1/models')
  const providers = await Promise.all(models.data.map((m) => api('GET', `/v1/providers?model=${encodeURIComponent(m.id)}`)))
  view.replaceChildren(
    h('section', { class: 'card', 'aria-labelledby': 'catalog-title' },
      h('h2', { id: 'catalog-title' }, 'Live catalog'),
      h('p', { class: 'muted' }, `${models.data.length} models. Prices in USD. Health and latency as the router observes them now.`)),
    ...models.data.map((m, i) => h('section', { class: 'card', 'aria-label': m.id, 'data-model': m.id },
      h('h2', { class: 'mono' }, m.id),
      h('p', { class: 'muted' }, `${m.type}; formats ${m.supported_formats.join(', ') || '–'}; context ${m.context_length ?? '–'}; ${m.provider_count} provider(s)`),
      table(`Providers of ${m.id}`, ['Address', 'Tier', 'Health', { label: 'Latency (ms)', num: true }, { label: 'Uptime', num: true }, 'Price'],
        providers[i].data.map((p) => h('tr', {},
          h('td', { class: 'mono' }, p.address),
          h('td', {}, p.trust_mode + (p.verifiability ? ` (${p.verifiability})` : '')),
          h('td', { class: p.is_healthy ? 'healthy' : 'unhealthy' }, p.is_healthy ? 'healthy' : 'unhealthy'),
          h('td', { class: 'num' }, p.latency ?? '–'),
          h('td', { class: 'num' }, p.uptime ?? '–'),
          h('td', {}, price(p.pricing))))))),
  )
}
