"""murmur-door's wire side: tokens, credentials, the door's auth middleware, A2A, proxy.

Nothing here manages files or processes; that is ``launcher``'s job.
"""
