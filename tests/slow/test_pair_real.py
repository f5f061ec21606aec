"""Real STS-B (../shared/data/pair/stsb) with the MiniLM package model (make test-slow)."""

from encoder_tasks.backbone import load_tokenizer
from encoder_tasks.config import DataArguments
from encoder_tasks.data import load_splits
from encoder_tasks.tasks.embedding import EmbeddingTask
from encoder_tasks.tasks.embedding.args import EmbeddingArguments, EmbeddingSettings
from encoder_tasks.tasks.embedding.evaluation import evaluate_embeddings
from encoder_tasks.tasks.embedding.model import load_bi_encoder
from encoder_tasks.tasks.pair import PairArguments, PairTask

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
COLUMNS = "genre,source,year,id,score,sentence1,sentence2"


def sts_args(shared_data, **files):
    return DataArguments(data_dir=str(shared_data), column_names=COLUMNS, **files)


def test_stsb_files_read_as_published(shared_data):
    args = sts_args(
        shared_data,
        train_file="pair/stsb/sts-train.csv",
        validation_file="pair/stsb/sts-dev.csv",
        test_file="pair/stsb/sts-test.csv",
    )
    splits = load_splits(args)
    assert [len(splits[s].dataset) for s in ("train", "validation", "test")] == [5749, 1500, 1379]
    prepared = PairTask().prepare(splits, load_tokenizer(MINILM), PairArguments(), args)
    assert prepared.settings.problem_type == "regression"
    assert min(prepared.train["labels"]) == 0.0 and max(prepared.train["labels"]) == 5.0


def test_minilm_as_shipped_ranks_stsb_dev_pairs(shared_data):
    args = sts_args(shared_data, validation_file="pair/stsb/sts-dev.csv")
    splits = load_splits(args, required=("validation",))
    saved = EmbeddingSettings(loss="cosent", evaluation="sts", retrieval_k="1,5,10")
    tokenizer = load_tokenizer(MINILM)
    prepared = EmbeddingTask().prepare(splits, tokenizer, EmbeddingArguments(evaluation="sts"), args, saved)
    model = load_bi_encoder(MINILM)
    metrics = evaluate_embeddings(model, tokenizer, prepared.eval, prepared.settings)
    # all-MiniLM-L6-v2 was trained for sentence similarity, so a working pooling and tokenizer score above
    # 0.8 on STS-B dev without fine-tuning; a broken one falls far below
    assert metrics["cosine_spearman"] > 0.8
