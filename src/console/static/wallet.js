// Sign-in with an injected wallet (EIP-1193 window.ethereum) and a Sign-In with Ethereum message (EIP-4361),
// written in exactly the form the router parses (viem's parseSiweMessage).
import { api, ApiError } from './api.js'

function toHex(text) {
  let out = '0x'
  for (const byte of new TextEncoder().encode(text)) out += byte.toString(16).padStart(2, '0')
  return out
}

/** The EIP-4361 message text for the fields the router handed out with its nonce. */
export function siweMessage({ domain, address, statement, uri, version, chainId, nonce, issuedAt, expirationTime }) {
  const lines = [`${domain} wants you to sign in with your Ethereum account:`, address, '']
  if (statement) lines.push(statement, '')
  lines.push(`URI: ${uri}`, `Version: ${version}`, `Chain ID: ${chainId}`, `Nonce: ${nonce}`, `Issued At: ${issuedAt}`)
  if (expirationTime) lines.push(`Expiration Time: ${expirationTime}`)
  return lines.join('\n')
}

function walletError(err) {
  if (err instanceof ApiError) return err
  // EIP-1193 errors: 4001 is the user saying no.
  const code = err && typeof err.code === 'number' ? err.code : 0
  const message = code === 4001 ? 'the wallet request was rejected' : `the wallet answered: ${err && err.message ? err.message : String(err)}`
  return new ApiError(0, code === 4001 ? 'user_rejected' : 'wallet_error', message)
}

/** Asks the wallet for an account, has it sign the router's SIWE message, and opens a session. */
export async function signInWithWallet(onStatus) {
  const eth = window.ethereum
  if (!eth || typeof eth.request !== 'function') {
    throw new ApiError(0, 'no_wallet', 'no wallet found: install or enable an Ethereum wallet extension (EIP-1193), then reload')
  }
  try {
    onStatus('Asking the wallet for an account…')
    const accounts = await eth.request({ method: 'eth_requestAccounts' })
    const address = accounts && accounts[0]
    if (!address) throw new ApiError(0, 'no_account', 'the wallet shared no account')
    const n = await api('GET', '/v1/auth/nonce')
    const chainId = parseInt(await eth.request({ method: 'eth_chainId' }), 16)
    if (chainId !== n.chain_id) {
      onStatus(`Asking the wallet to switch to chain ${n.chain_id}…`)
      await eth.request({ method: 'wallet_switchEthereumChain', params: [{ chainId: '0x' + n.chain_id.toString(16) }] })
    }
    // No Expiration Time: the nonce already bounds when the message can be used, and the router bounds the session.
    const message = siweMessage({
      domain: n.domain, address, statement: n.statement, uri: n.uri, version: n.version, chainId: n.chain_id, nonce: n.nonce,
      issuedAt: new Date().toISOString(),
    })
    onStatus('Waiting for the wallet to sign…')
    const signature = await eth.request({ method: 'personal_sign', params: [toHex(message), address] })
    onStatus('Checking the signature…')
    return await api('POST', '/v1/auth/verify', { message, signature })
  } catch (err) {
    throw walletError(err)
  }
}
