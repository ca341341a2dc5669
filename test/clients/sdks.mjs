// The SDKs the client tests drive, resolved from this folder's own node_modules (see harness.ts).
export * as agents from '@openai/agents'
export * as langchain from '@langchain/openai'
export * as messages from '@langchain/core/messages'
export * as tools from '@langchain/core/tools'
export { z } from 'zod'
