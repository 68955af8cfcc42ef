"""The local embedding model in a child process of its own (``KNOWLEDGE_EMBEDDING_PROCESS=child``).

Why: a web process that loads sentence-transformers grows by PyTorch's ~480 MiB, and the
model computing a batch of chunks holds the process's GIL in Python between its operators,
which delays every streamed token of the chats that process serves. In a child the model's
memory and its CPU time are the child's: the parent keeps only a pipe.

One child per process that embeds (a web process, a Celery worker), started at its first
text to embed, never at import: ``python -m knowledge.embed_child <read-fd> <write-fd> <model
directory> <threads> <nice>``. Requests and answers are pickled over two pipes
(``multiprocessing.connection``): ``(id, kind, texts)`` → ``(id, vectors | None, error)``,
vectors a float32 array of unit rows. ``kind`` is ``"query"`` (a search's question) or
``"batch"`` (a background job's chunks): each kind has a thread of its own in the child, and
the batch thread lowers its own CPU priority by ``nice`` (Linux priorities are per thread),
so a search's question is neither queued behind a job's batch nor slowed by it more than
the shared cores make inevitable. Tokenizing is serialised (the fast tokenizer refuses
concurrent use); the model's forward passes run in parallel (PyTorch releases the GIL).

The child exits when the parent's end of the pipe closes (the parent exited); a child that
dies is started again at the next text (``LocalModelProcess``), its pending requests fail
with ``EmbeddingUnavailable`` — a search then answers from keywords, a job is retried.
"""

from __future__ import annotations

import itertools
import logging
import os
import subprocess
import sys
import threading
from concurrent.futures import Future
from multiprocessing.connection import Connection

logger = logging.getLogger(__name__)


class ChildGone(Exception):
    """The child exited (or could not start) before answering."""


class LocalModelProcess:
    """The parent's handle on one child (thread-safe; the child is started lazily)."""

    def __init__(self, model_path: str, *, threads: int = 1, nice: int = 10, start_timeout_s: float = 120.0):
        self.model_path = model_path
        self.threads = max(1, int(threads))
        self.nice = max(0, int(nice))
        self.start_timeout_s = start_timeout_s
        self._lock = threading.Lock()  # starting, sending
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None
        self._pending: dict[int, Future] = {}
        self._ids = itertools.count(1)

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def _start(self) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
               "OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads)}
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "knowledge.embed_child", str(to_child_r), str(from_child_w), self.model_path,
                 str(self.threads), str(self.nice)],
                pass_fds=(to_child_r, from_child_w), stdin=subprocess.DEVNULL, env=env, close_fds=True,
                cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            )
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self._conn = Connection(to_child_w, readable=False)
        reader = Connection(from_child_r, writable=False)
        threading.Thread(target=self._read, args=(self._proc, reader), name="kb-embed-child-reader",
                         daemon=True).start()
        logger.info("embedding model process %s started (%s)", self._proc.pid, self.model_path)

    def _read(self, proc: subprocess.Popen, reader: Connection) -> None:
        try:
            while True:
                request_id, vectors, error = reader.recv()
                future = self._pending.pop(request_id, None)
                if future is None:
                    continue
                if error is None:
                    future.set_result(vectors)
                else:
                    future.set_exception(RuntimeError(error))
        except (EOFError, OSError):
            pass
        finally:
            reader.close()
            with self._lock:
                if self._proc is proc:
                    self._proc = None
                    if self._conn is not None:
                        self._conn.close()
                        self._conn = None
                    pending, self._pending = self._pending, {}
                else:
                    pending = {}
            code = proc.wait()
            logger.warning("embedding model process %s exited (code %s)", proc.pid, code)
            for future in pending.values():
                if not future.done():
                    future.set_exception(ChildGone(f"the embedding model process exited (code {code})"))

    def submit(self, texts: list[str], *, kind: str) -> Future:
        future: Future = Future()
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            request_id = next(self._ids)
            self._pending[request_id] = future
            try:
                self._conn.send((request_id, kind, list(texts)))
            except (OSError, ValueError) as exc:
                self._pending.pop(request_id, None)
                future.set_exception(ChildGone(f"the embedding model process is gone: {exc}"))
        return future

    def encode(self, texts: list[str], *, kind: str = "batch", timeout: float | None = None):
        """float32 unit vectors (one row per text); raises ``ChildGone`` or ``TimeoutError``."""
        return self.submit(texts, kind=kind).result(timeout=timeout)

    def stop(self) -> None:
        with self._lock:
            proc, conn = self._proc, self._conn
            self._proc = self._conn = None
        if conn is not None:
            conn.close()  # the child sees EOF and exits
        if proc is not None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


# --- the child ---------------------------------------------------------------------------------
def _serve(read_fd: int, write_fd: int, model_path: str, threads: int, nice: int) -> None:
    import queue

    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    model = SentenceTransformer(model_path, device="cpu", local_files_only=True)
    tokenize = model.tokenize
    tokenize_lock = threading.Lock()

    def serialised_tokenize(texts, *args, **kwargs):
        with tokenize_lock:
            return tokenize(texts, *args, **kwargs)

    model.tokenize = serialised_tokenize
    inbox = Connection(read_fd, writable=False)
    outbox = Connection(write_fd, readable=False)
    send_lock = threading.Lock()
    queues = {"query": queue.SimpleQueue(), "batch": queue.SimpleQueue()}

    def work(kind: str) -> None:
        if kind == "batch" and nice:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, os.getpriority(
                os.PRIO_PROCESS, threading.get_native_id()) + nice))
        while True:
            request_id, texts = queues[kind].get()
            try:
                with torch.inference_mode():
                    vectors = model.encode(texts, batch_size=max(1, len(texts)), normalize_embeddings=True,
                                           convert_to_numpy=True, show_progress_bar=False)
                answer = (request_id, vectors.astype("float32"), None)
            except Exception as exc:  # a bad input: that request fails, the child goes on
                answer = (request_id, None, f"{type(exc).__name__}: {exc}")
            with send_lock:
                outbox.send(answer)

    for kind in queues:
        threading.Thread(target=work, args=(kind,), name=f"embed-{kind}", daemon=True).start()
    try:
        while True:
            request_id, kind, texts = inbox.recv()
            queues["query" if kind == "query" else "batch"].put((request_id, texts))
    except (EOFError, OSError):
        pass  # the parent exited or stopped us
    os._exit(0)


if __name__ == "__main__":
    _serve(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
