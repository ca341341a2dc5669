// Management keys (mk-): create with a name and scopes (secret shown once), rename, change scopes, revoke after
// a confirmation; each with when and from where it was last used. Calls /v1/management-keys (session only).
import { api, h, iso, table } from './api.js'
import { keyPage } from './ui.js'

const SCOPES = [
  ['account:read', 'read balance, funds and usage'],
  ['keys:read', 'list API keys'],
  ['keys:create', 'create API keys'],
  ['keys:manage', 'edit and revoke API keys'],
]

function mkForm(key, onSubmit, onCancel) {
  const id = key ? `mk-edit-${key.key_id}` : 'new-mk'
  const name = h('input', { id: `${id}-name`, name: 'name', required: true, maxlength: 200, value: key ? key.name : '', autocomplete: 'off' })
  const boxes = SCOPES.map(([scope]) => h('input', { type: 'checkbox', id: `${id}-${scope}`, name: 'scopes', value: scope, checked: key ? key.scopes.includes(scope) : false }))
  return h('form', {
    class: 'fields',
    'aria-label': key ? `Edit ${key.name}` : 'Create a management key',
    onsubmit: (e) => {
      e.preventDefault()
      onSubmit({ name: name.value, scopes: boxes.filter((b) => b.checked).map((b) => b.value) })
    },
  },
  h('label', { for: `${id}-name` }, 'Name', name),
  h('fieldset', {}, h('legend', {}, 'Scopes'),
    SCOPES.map(([scope, what], i) => h('label', { for: `${id}-${scope}` }, boxes[i], h('span', { class: 'mono' }, scope), h('span', { class: 'muted' }, `: ${what}`)))),
  h('div', { class: 'actions' },
    h('button', { type: 'submit', class: 'primary' }, key ? 'Save changes' : 'Create management key'),
    onCancel ? h('button', { type: 'button', onclick: onCancel }, 'Cancel') : null))
}

export async function renderManagementKeys(view) {
  const keys = await api('GET', '/v1/management-keys')
  const { create, actions, editor } = keyPage({
    view,
    render: renderManagementKeys,
    path: '/v1/management-keys',
    what: 'management key',
    consequence: 'Calls with it are refused from the next one on.',
    form: mkForm,
    focusAfterRevoke: '#new-mk-name',
  })

  const rows = keys.data.map((k) => h('tr', { 'data-key-id': k.key_id },
    h('td', {}, k.name), h('td', { class: 'mono' }, k.key_preview),
    h('td', { class: 'mono' }, k.scopes.join(' ')),
    h('td', { class: `status-${k.status}` }, k.status),
    h('td', {}, iso(k.created_at)),
    h('td', {}, iso(k.last_used_at)),
    h('td', { class: 'mono' }, k.last_source_ip ?? '–'),
    h('td', {}, actions(k))))

  view.replaceChildren(
    h('section', { class: 'card', 'aria-labelledby': 'new-mk-title' },
      h('h2', { id: 'new-mk-title' }, 'New management key (mk-)'),
      h('p', { class: 'muted' }, 'A management key lets a script read this account and manage its API keys, with the scopes you give it. It never calls inference, is never billed and never expires; it cannot manage management keys.'),
      h('div', { 'data-slot': 'reveal' }),
      mkForm(null, create, null)),
    editor,
    h('section', { class: 'card', 'aria-labelledby': 'mk-title' },
      h('h2', { id: 'mk-title' }, 'Management keys'),
      table('Management keys of this account, oldest first', ['Name', 'Preview', 'Scopes', 'Status', 'Created', 'Last used', 'Last source IP', 'Actions'], rows)),
  )
}
