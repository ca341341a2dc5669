// API keys (sk-): create with name, trust mode, credit limit and reset period, allowed models and providers,
// expiry; list; edit; revoke after a confirmation. Calls /v1/api-keys with the console session.
import { api, h, iso, table } from './api.js'
import { keyPage } from './ui.js'

const TRUST = [['', 'None (any tier)'], ['standard', 'standard'], ['verified', 'verified'], ['private', 'private']]
const RESETS = ['never', 'daily', 'weekly', 'monthly']

function list(text) {
  const items = text.split(/[\s,]+/).filter((x) => x !== '')
  return items.length === 0 ? null : items
}

/** The datetime-local value (local time) of an ISO timestamp, '' for none. */
function localValue(isoText) {
  if (!isoText) return ''
  const d = new Date(isoText)
  const pad = (n) => String(n).padStart(2, '0')
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`
}

/** The create/edit form; `key` fills it for an edit. Resolves the body to send, or null when cancelled. */
function keyForm(models, key, onSubmit, onCancel) {
  const id = key ? `edit-${key.key_id}` : 'new-key'
  const field = (name, label, control) => h('label', { for: `${id}-${name}` }, label, control)
  const name = h('input', { id: `${id}-name`, name: 'name', required: true, maxlength: 200, value: key ? key.name : '', autocomplete: 'off' })
  const trust = h('select', { id: `${id}-trust_mode`, name: 'trust_mode' }, TRUST.map(([v, l]) => h('option', { value: v, selected: key && key.trust_mode === v }, l)))
  const limit = h('input', { id: `${id}-credit_limit`, name: 'credit_limit', inputmode: 'decimal', placeholder: 'no limit', value: key && key.credit_limit !== null ? key.credit_limit : '' })
  const reset = h('select', { id: `${id}-reset_period`, name: 'reset_period' }, RESETS.map((r) => h('option', { value: r, selected: key && key.reset_period === r }, r)))
  const listId = `${id}-models-list`
  const allowedModels = h('input', { id: `${id}-allowed_models`, name: 'allowed_models', list: listId, placeholder: 'all models (comma-separated ids)', value: key && key.allowed_models ? key.allowed_models.join(', ') : '' })
  const allowedProviders = h('input', { id: `${id}-allowed_providers`, name: 'allowed_providers', placeholder: 'all providers (comma-separated 0x addresses)', value: key && key.allowed_providers ? key.allowed_providers.join(', ') : '' })
  const expires = h('input', { id: `${id}-expires_at`, name: 'expires_at', type: 'datetime-local', value: key ? localValue(key.expires_at) : '' })
  const form = h('form', {
    class: 'fields',
    'aria-label': key ? `Edit ${key.name}` : 'Create an API key',
    onsubmit: (e) => {
      e.preventDefault()
      const body = {
        name: name.value,
        trust_mode: trust.value === '' ? null : trust.value,
        credit_limit: limit.value.trim() === '' ? null : limit.value.trim(),
        reset_period: reset.value,
        allowed_models: list(allowedModels.value),
        allowed_providers: list(allowedProviders.value),
        expires_at: expires.value === '' ? null : new Date(expires.value).toISOString(),
      }
      // An edit that leaves the expiry as it was must not send it (a past expiry would be refused).
      if (key && localValue(key.expires_at) === expires.value) delete body.expires_at
      onSubmit(body)
    },
  },
  field('name', 'Name', name),
  field('trust_mode', 'Trust mode', trust),
  field('credit_limit', 'Credit limit (USD)', limit),
  field('reset_period', 'Limit resets', reset),
  field('allowed_models', 'Allowed models', allowedModels),
  h('datalist', { id: listId }, models.map((m) => h('option', { value: m }))),
  field('allowed_providers', 'Allowed providers', allowedProviders),
  field('expires_at', 'Expires (local time; empty: never)', expires),
  h('div', { class: 'actions' },
    h('button', { type: 'submit', class: 'primary' }, key ? 'Save changes' : 'Create key'),
    onCancel ? h('button', { type: 'button', onclick: onCancel }, 'Cancel') : null))
  return form
}

export async function renderApiKeys(view) {
  const [keys, catalog] = await Promise.all([api('GET', '/v1/api-keys'), api('GET', '/v1/models').catch(() => ({ data: [] }))])
  const models = catalog.data.map((m) => m.id)
  const { create, actions, editor } = keyPage({
    view,
    render: renderApiKeys,
    path: '/v1/api-keys',
    what: 'API key',
    consequence: 'Requests with it are refused from the next one on.',
    form: (key, onSubmit, onCancel) => keyForm(models, key, onSubmit, onCancel),
    focusAfterRevoke: '#new-key-name',
  })

  const rows = keys.data.map((k) => h('tr', { 'data-key-id': k.key_id },
    h('td', {}, k.name), h('td', { class: 'mono' }, k.key_preview),
    h('td', { class: `status-${k.status}` }, k.status),
    h('td', {}, k.trust_mode || '–'),
    h('td', { class: 'num' }, k.credit_limit === null ? '–' : `${k.credit_limit} / ${k.reset_period}`),
    h('td', { class: 'num' }, k.used),
    h('td', {}, k.allowed_models ? k.allowed_models.join(', ') : 'all'),
    h('td', { class: 'mono' }, k.allowed_providers ? k.allowed_providers.join(', ') : 'all'),
    h('td', {}, iso(k.expires_at)),
    h('td', {}, iso(k.created_at)),
    h('td', {}, actions(k))))

  view.replaceChildren(
    h('section', { class: 'card', 'aria-labelledby': 'new-key-title' },
      h('h2', { id: 'new-key-title' }, 'New API key (sk-)'),
      h('div', { 'data-slot': 'reveal' }),
      keyForm(models, null, create, null)),
    editor,
    h('section', { class: 'card', 'aria-labelledby': 'keys-title' },
      h('h2', { id: 'keys-title' }, 'API keys'),
      table('API keys of this account, oldest first', ['Name', 'Preview', 'Status', 'Trust mode', { label: 'Limit', num: true }, { label: 'Used (USD)', num: true },
        'Models', 'Providers', 'Expires', 'Created', 'Actions'], rows)),
  )
}
