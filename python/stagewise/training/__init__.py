"""Reward-model training (PyTorch): the jobs behind `stagewise train` and `stagewise adapt`, and the scripts that
trained the shipped models of models/. Run a job as `python -m stagewise.training <job> ...` from the project's
venv (scripts/setup.sh installs the pinned torch, onnx, onnxruntime, pillow and onnxscript):

    train           train.py: a progress (or hop) model from a dataset written by `stagewise record`
    train-dataset   train_dataset.py: from arrays `stagewise train` prepared from any LeRobot v3 dataset
    adapt           adapt.py: fine-tune a progress model on a few demonstrations (`stagewise adapt`)
    export-parts    export_parts.py: add the two-part form (encoder + head) to a trained model
    keypoints       keypoints.py: a keypoint encoder of camera frames, trained on the frames alone (the pixel
                    learner's frozen input: `stagewise learn --obs pixels --encoder-init FILE.pt`)

Importing this package imports nothing heavy: each job imports torch when it runs.
"""

# job name -> module (relative to this package); `python -m stagewise.training JOB --help` shows its flags.
JOBS = {
    "train": "train",
    "train-dataset": "train_dataset",
    "adapt": "adapt",
    "export-parts": "export_parts",
    "keypoints": "keypoints",
    "locator": "locator",
}
