# shellcheck shell=bash
# The model, data and checkpoint settings both recipes take, declared once (NAME TYPE ALLOWED DEFAULT MEANING,
# environment variable VLGRPO_<NAME>; see settings.sh). A recipe calls vg_declare_data_settings first in its
# table, so the order of --help and of the README table stays the recipe's.

vg_declare_data_settings() {
  vg_setting MODEL_PATH path dir /models/Qwen3-VL-30B-A3B-Instruct "Hugging Face model folder (no remote code)"
  vg_setting TRAIN_FILE path file /data/geo3k/train.parquet "training parquet in verl's format (python3 -m vlgrpo data geo3k)"
  vg_setting VAL_FILE path file /data/geo3k/test.parquet "validation parquet"
  vg_setting CHECKPOINT_DIR path dirw /checkpoints "checkpoint folder; must be writable and, in a container, a mount"
  vg_setting RESUME_MODE enum "auto disable resume_path" auto "resume from the latest checkpoint (auto), start fresh (disable), or from VLGRPO_RESUME_FROM_PATH"
  vg_setting RESUME_FROM_PATH path dir "" "a global_step_N checkpoint folder; only with VLGRPO_RESUME_MODE=resume_path"
}
