// The console's shell: sign-in state and navigation between views (#overview, #api-keys, #management-keys,
// #catalog).
import { api, h } from './api.js'
import { clearError, onSessionLost, showError } from './ui.js'
import { renderCatalog } from './catalog.js'
import { renderApiKeys } from './keys.js'
import { renderManagementKeys } from './management-keys.js'
import { renderOverview } from './overview.js'
import { signInWithWallet } from './wallet.js'

const $ = (id) => document.getElementById(id)
const VIEWS = { overview: renderOverview, 'api-keys': renderApiKeys, 'management-keys': renderManagementKeys, catalog: renderCatalog }

let signedInAccount = null

function signedOut() {
  signedInAccount = null
  $('nav').hidden = true
  $('who').hidden = true
  $('view').hidden = true
  $('view').replaceChildren()
  $('signin').hidden = false
}

function currentView() {
  const name = location.hash.slice(1)
  return name in VIEWS ? name : 'overview'
}

async function show() {
  if (signedInAccount === null) return
  const name = currentView()
  for (const a of document.querySelectorAll('#nav a')) {
    if (a.dataset.view === name) a.setAttribute('aria-current', 'page')
    else a.removeAttribute('aria-current')
  }
  const view = $('view')
  view.replaceChildren(h('p', { class: 'muted' }, 'Loading…'))
  try {
    await VIEWS[name](view, { account: signedInAccount })
  } catch (err) {
    view.replaceChildren()
    showError(err)
  }
}

function signedIn(session) {
  signedInAccount = session.account
  $('signin').hidden = true
  $('nav').hidden = false
  $('who').hidden = false
  $('account').textContent = session.account
  $('view').hidden = false
  show()
}

async function start() {
  onSessionLost(signedOut)
  $('signin-button').addEventListener('click', async () => {
    clearError()
    const status = $('signin-status')
    try {
      const session = await signInWithWallet((text) => (status.textContent = text))
      status.textContent = ''
      signedIn(session)
      $('main').focus()
    } catch (err) {
      status.textContent = ''
      showError(err)
    }
  })
  $('logout').addEventListener('click', async () => {
    clearError()
    try {
      await api('POST', '/v1/auth/logout')
    } catch (err) {
      showError(err)
    }
    signedOut()
    $('signin-button').focus()
  })
  window.addEventListener('hashchange', () => {
    clearError()
    show().then(() => $('main').focus())
  })
  try {
    signedIn(await api('GET', '/v1/auth/session'))
  } catch {
    signedOut()
  }
}

start()
