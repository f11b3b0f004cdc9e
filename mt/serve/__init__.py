"""``mt-serve``: a trained model behind HTTP (LibreTranslate's API and mt's own), with dynamic batching.

One decoding worker thread owns the engine (an mt checkpoint or a CTranslate2 export); the asyncio
front validates requests and queues them; the worker decodes lines of concurrent requests together
under a token budget and routes each answer back to its request (``batching``).
"""

# no re-exports: mt-serve's flag defaults come from mt.serve.settings without loading torch or FastAPI
