"""``mt-serve``: a trained model behind HTTP (LibreTranslate's API and mt's own), with dynamic batching.

One decoding worker thread owns the engine (an mt checkpoint or a CTranslate2 export); the asyncio
front validates requests and queues them; the worker decodes lines of concurrent requests together
under a token budget and routes each answer back to its request (``batching``).
"""

from mt.serve.app import create_app
from mt.serve.engine import Engine, Options, Output, TorchEngine
from mt.serve.settings import ServeSettings

__all__ = ["Engine", "Options", "Output", "ServeSettings", "TorchEngine", "create_app"]
