"""Throughput of ``spacy crf annotate`` with each engine, side by side in one run.

    python scripts/bench_annotate.py zh_crf_pipeline project/corpus/sxu/dev.spacy project/corpus/msra/dev.spacy --limit 10000
    python scripts/bench_annotate.py PIPELINE dev.txt --limit 300 --settings local:1,ray:1,ray:2 --output bench.json

The texts (of ``.spacy`` docs, ``.txt`` lines or ``.jsonl`` "text" fields, the
first ``--limit`` over all files in order) are written as ``--shards`` JSONL
shards to a temp folder; every setting annotates them into its own output
folder through ``spacy_crf.annotate.annotate`` (records, files, counts: the
whole command, not just the model). A setting is ``local:N_PROCESS[:THREADS]``
or ``ray:WORKERS`` (one CPU and one torch thread per actor). One local Ray
instance with all CPUs is started before the first Ray setting and shared.

Per setting: wall seconds, docs/s and chars/s over the wall time, the
seconds to the first record (pipeline load / actor start-up), and the
"steady" chars/s over the last three quarters of the records, as they reach
the writer (start-up and the first batches left out; it needs a corpus of
many batches to mean anything). Ratios: ray-2/ray-1 and ray-1/local-1, on
both rates. With Ray, one fresh actor's start-up time and peak memory are
printed too.
Every setting must write the same records (ids, in order) as the first; the
number whose annotations differ (float near-ties under other thread counts
or batches; 0 expected between local:N:1 and ray with the same batch size)
is reported.
"""

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import srsly
from wasabi import msg

from spacy_crf.annotate import annotate, read_output
from spacy_crf.corpora.base import read_docbin


def load_texts(paths: List[str], limit: int) -> List[str]:
    texts: List[str] = []
    for path in paths:
        if path.endswith(".spacy"):
            texts.extend(doc.text for doc in read_docbin(path))
        elif path.endswith(".jsonl"):
            texts.extend(r["text"] for r in srsly.read_jsonl(path))
        else:
            texts.extend(Path(path).read_text(encoding="utf8").splitlines())
        if limit and len(texts) >= limit:
            break
    return texts[:limit] if limit else texts


def write_shards(texts: List[str], folder: Path, n_shards: int) -> None:
    size = -(-len(texts) // n_shards)
    for k in range(n_shards):
        part = texts[k * size : (k + 1) * size]
        srsly.write_jsonl(folder / f"part-{k:04d}.jsonl", [{"text": t, "id": k * size + i} for i, t in enumerate(part)])


def records(folder: Path) -> List[Dict]:
    return [r for p in sorted(folder.glob("*.jsonl")) if p.name != "errors.jsonl" for r in read_output(p)]


def actor_footprint(pipeline: str, texts: List[str], batch_size: int) -> Dict[str, float]:
    """Start-up seconds (imports + loading the pipeline) and peak memory of one
    fresh Ray actor with one CPU, after it annotated one batch."""
    import ray

    @ray.remote(num_cpus=1)
    class Probe:
        def run(self, pipeline, texts, batch_size):
            import resource
            import time

            start = time.perf_counter()
            from spacy_crf.annotate.engines import load_pipeline, set_threads

            set_threads(1)
            nlp = load_pipeline(pipeline)
            load_s = time.perf_counter() - start
            list(nlp.pipe(texts, batch_size=batch_size))
            return {
                "startup_s": round(load_s, 2),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            }

    probe = Probe.remote()
    try:
        return ray.get(probe.run.remote(pipeline, texts[:batch_size], batch_size))
    finally:
        ray.kill(probe)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pipeline", help="an installed package name or a pipeline folder")
    parser.add_argument("data", nargs="+", help=".spacy, .txt or .jsonl files")
    parser.add_argument("--limit", type=int, default=10000, help="texts in all (0: all)")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--settings", default="local:1,local:1:1,local:2,ray:1,ray:2")
    parser.add_argument("--output", default="", help="write the figures to this JSON file")
    args = parser.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    texts = load_texts(args.data, args.limit)
    n_chars = sum(map(len, texts))
    msg.info(
        f"{args.pipeline}: {len(texts):,} texts, {n_chars:,} chars in {args.shards} shards; "
        f"batch size {args.batch_size}; {os.cpu_count()} CPUs"
    )
    work = Path(tempfile.mkdtemp(prefix="bench_annotate_"))
    runs = []
    reference = None
    ray_started = False
    footprint = None
    try:
        (work / "in").mkdir()
        write_shards(texts, work / "in", args.shards)
        for setting in args.settings.split(","):
            engine, n, *rest = setting.split(":")
            marks: List[tuple] = []
            options = {
                "engine": engine,
                "batch_size": args.batch_size,
                "progress": lambda docs, chars: marks.append((time.perf_counter(), chars)),
            }
            if engine == "local":
                options.update(n_process=int(n), threads=int(rest[0]) if rest else None)
            else:
                if not ray_started:
                    import ray

                    ray.init(
                        num_cpus=os.cpu_count(),
                        include_dashboard=False,
                        log_to_driver=False,
                        configure_logging=True,
                        logging_level="warning",
                    )
                    ray_started = True
                options.update(workers=int(n), cpus_per_worker=1)
            out = work / setting.replace(":", "_")
            summary = annotate(args.pipeline, str(work / "in"), str(out), **options)
            got = records(out)
            if reference is None:
                reference = got
            if len(got) != len(reference) or [r["id"] for r in got] != [r["id"] for r in reference]:
                raise SystemExit(f"{setting}: not the same records (ids, order) as {runs[0]['setting']}")
            differ = sum(a != b for a, b in zip(got, reference))
            if differ:
                msg.warn(
                    f"{setting}: {differ} records differ from {runs[0]['setting']}'s (float near-ties: "
                    "other threads or batches)"
                )
            # steady: the last 3/4 of the records, i.e. after start-up and the first batches
            (t0, c0), (t1, c1) = (marks[len(marks) // 4], marks[-1]) if len(marks) > 1 else ((0, 0), (0, 0))
            runs.append(
                {
                    "setting": setting,
                    "docs": summary["docs"],
                    "chars": summary["chars"],
                    "seconds": summary["seconds"],
                    "docs_per_s": summary["docs_per_s"],
                    "chars_per_s": summary["chars_per_s"],
                    "first_record_s": summary["first_record_s"],
                    "records_differing_from_first": differ,
                    "steady_chars_per_s": round((c1 - c0) / (t1 - t0), 1) if t1 > t0 else None,
                }
            )
            msg.text(f"{setting}: {summary['seconds']:.1f}s, {summary['chars_per_s']:,.0f} chars/s")
            shutil.rmtree(out)
        footprint = actor_footprint(args.pipeline, texts, args.batch_size) if ray_started else None
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if ray_started:
            import ray

            ray.shutdown()
    msg.table(
        [
            (
                r["setting"],
                r["docs"],
                f"{r['seconds']:.1f}",
                f"{r['docs_per_s']:,.1f}",
                f"{r['chars_per_s']:,.0f}",
                f"{r['first_record_s']:.1f}",
                f"{r['steady_chars_per_s']:,.0f}",
            )
            for r in runs
        ],
        header=("setting", "docs", "seconds", "docs/s", "chars/s", "first record s", "steady chars/s"),
        divider=True,
    )
    by = {r["setting"]: r for r in runs}
    ratios = {}
    for name, a, b in (
        ("ray-2/ray-1", "ray:2", "ray:1"),
        ("ray-1/local-1", "ray:1", "local:1"),
        ("ray-1/local-1 (1 thread)", "ray:1", "local:1:1"),
    ):
        if a in by and b in by:
            ratios[name] = {key: round(by[a][key] / by[b][key], 3) for key in ("chars_per_s", "steady_chars_per_s")}
            msg.text(
                f"{name}: {ratios[name]['chars_per_s']:.2f} (wall), {ratios[name]['steady_chars_per_s']:.2f} (steady)"
            )
    if footprint:
        msg.text(
            f"one actor: start-up {footprint['startup_s']:.1f}s (imports + pipeline), "
            f"peak memory {footprint['peak_rss_mb']:,.0f} MB after one batch"
        )
    if args.output:
        from importlib.metadata import PackageNotFoundError, version

        try:
            ray_version = version("ray")
        except PackageNotFoundError:
            ray_version = None
        srsly.write_json(
            args.output,
            {
                "pipeline": args.pipeline,
                "data": args.data,
                "texts": len(texts),
                "chars": n_chars,
                "shards": args.shards,
                "batch_size": args.batch_size,
                "cpus": os.cpu_count(),
                "ray": ray_version,
                "runs": runs,
                "ratios": ratios,
                "actor": footprint,
            },
        )
        msg.good(f"Wrote {args.output}")


if __name__ == "__main__":
    main()
