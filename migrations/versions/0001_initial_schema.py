"""initial schema

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-29
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table('workloads',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('owner', sa.String(length=100), nullable=False),
    sa.Column('contract_yaml', sa.Text(), nullable=False),
    sa.Column('contract_digest', sa.String(length=64), nullable=False),
    sa.Column('partition', sa.String(length=100), nullable=True),
    sa.Column('max_concurrent', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name')
    )
    op.create_table('campaigns',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('workload_id', sa.Integer(), nullable=True),
    sa.Column('owner', sa.String(length=100), nullable=False),
    sa.Column('state', sa.String(length=20), nullable=False),
    sa.Column('contract_path', sa.Text(), nullable=False),
    sa.Column('contract_yaml', sa.Text(), nullable=False),
    sa.Column('contract_digest', sa.String(length=64), nullable=False),
    sa.Column('repo_path', sa.Text(), nullable=False),
    sa.Column('workdir', sa.Text(), nullable=False),
    sa.Column('executor', sa.String(length=20), nullable=False),
    sa.Column('partition', sa.String(length=100), nullable=True),
    sa.Column('budget_gpu_hours', sa.Float(), nullable=False),
    sa.Column('budget_trials', sa.Integer(), nullable=False),
    sa.Column('seed', sa.Integer(), nullable=False),
    sa.Column('scope_json', sa.JSON(), nullable=True),
    sa.Column('doctor_json', sa.JSON(), nullable=True),
    sa.Column('result_json', sa.JSON(), nullable=True),
    sa.Column('delivered_speedup', sa.Float(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['workload_id'], ['workloads.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('campaigns', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_campaigns_state'), ['state'], unique=False)

    op.create_table('experience',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('campaign_id', sa.Integer(), nullable=True),
    sa.Column('workload_class', sa.String(length=100), nullable=False),
    sa.Column('gpu', sa.String(length=100), nullable=False),
    sa.Column('knob', sa.String(length=100), nullable=False),
    sa.Column('value', sa.String(length=200), nullable=False),
    sa.Column('log_speedup', sa.Float(), nullable=True),
    sa.Column('mem_delta_gib', sa.Float(), nullable=True),
    sa.Column('verified', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['campaign_id'], ['campaigns.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('experience', schema=None) as batch_op:
        batch_op.create_index('ix_experience_knob', ['knob', 'value'], unique=False)

    op.create_table('trials',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('campaign_id', sa.Integer(), nullable=False),
    sa.Column('seq', sa.Integer(), nullable=False),
    sa.Column('trial_key', sa.String(length=64), nullable=False),
    sa.Column('stage', sa.String(length=20), nullable=False),
    sa.Column('config_json', sa.JSON(), nullable=False),
    sa.Column('patches_json', sa.JSON(), nullable=False),
    sa.Column('signature', sa.String(length=64), nullable=False),
    sa.Column('group_key', sa.String(length=64), nullable=True),
    sa.Column('status', sa.String(length=20), nullable=False),
    sa.Column('outcome', sa.String(length=20), nullable=True),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('executor', sa.String(length=20), nullable=False),
    sa.Column('job_id', sa.String(length=64), nullable=True),
    sa.Column('submit_time', sa.Float(), nullable=True),
    sa.Column('start_time', sa.Float(), nullable=True),
    sa.Column('end_time', sa.Float(), nullable=True),
    sa.Column('gpus', sa.Integer(), nullable=False),
    sa.Column('partition', sa.String(length=100), nullable=True),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('outdir', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['campaign_id'], ['campaigns.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('campaign_id', 'seq', name='uq_trials_campaign_seq'),
    sa.UniqueConstraint('trial_key')
    )
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.create_index('ix_trials_campaign_status', ['campaign_id', 'status'], unique=False)
        batch_op.create_index(batch_op.f('ix_trials_signature'), ['signature'], unique=False)
        batch_op.create_index('ix_trials_status', ['status'], unique=False)

    op.create_table('cost_ledger',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('campaign_id', sa.Integer(), nullable=False),
    sa.Column('trial_id', sa.Integer(), nullable=True),
    sa.Column('stage', sa.String(length=20), nullable=False),
    sa.Column('partition', sa.String(length=100), nullable=True),
    sa.Column('gpu_seconds', sa.Float(), nullable=False),
    sa.Column('llm_tokens', sa.Integer(), nullable=False),
    sa.Column('failure_class', sa.String(length=20), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['campaign_id'], ['campaigns.id'], ),
    sa.ForeignKeyConstraint(['trial_id'], ['trials.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('trial_id')
    )
    with op.batch_alter_table('cost_ledger', schema=None) as batch_op:
        batch_op.create_index('ix_cost_campaign', ['campaign_id'], unique=False)

    op.create_table('events',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('campaign_id', sa.Integer(), nullable=True),
    sa.Column('trial_id', sa.Integer(), nullable=True),
    sa.Column('kind', sa.String(length=40), nullable=False),
    sa.Column('payload', sa.JSON(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['campaign_id'], ['campaigns.id'], ),
    sa.ForeignKeyConstraint(['trial_id'], ['trials.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.create_index('ix_events_campaign', ['campaign_id'], unique=False)

    op.create_table('observations',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('trial_id', sa.Integer(), nullable=False),
    sa.Column('campaign_id', sa.Integer(), nullable=False),
    sa.Column('step_time_s', sa.Float(), nullable=True),
    sa.Column('peak_mem_gib', sa.Float(), nullable=True),
    sa.Column('censor_kind', sa.String(length=12), nullable=True),
    sa.Column('oom_shortfall_gib', sa.Float(), nullable=True),
    sa.Column('loss_window_mean', sa.Float(), nullable=True),
    sa.Column('accepted', sa.Boolean(), nullable=False),
    sa.Column('first_failed_layer', sa.String(length=4), nullable=True),
    sa.Column('details_json', sa.JSON(), nullable=True),
    sa.ForeignKeyConstraint(['campaign_id'], ['campaigns.id'], ),
    sa.ForeignKeyConstraint(['trial_id'], ['trials.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('trial_id')
    )
    with op.batch_alter_table('observations', schema=None) as batch_op:
        batch_op.create_index('ix_observations_campaign', ['campaign_id'], unique=False)

    op.create_table('receipts',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('trial_id', sa.Integer(), nullable=False),
    sa.Column('raw', sa.LargeBinary(), nullable=False),
    sa.Column('signature', sa.String(length=128), nullable=True),
    sa.Column('signature_ok', sa.Boolean(), nullable=False),
    sa.Column('received_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['trial_id'], ['trials.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('trial_id')
    )
    op.create_table('verdicts',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('trial_id', sa.Integer(), nullable=False),
    sa.Column('invariant', sa.String(length=40), nullable=False),
    sa.Column('layer', sa.String(length=4), nullable=False),
    sa.Column('status', sa.String(length=12), nullable=False),
    sa.Column('required', sa.Boolean(), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['trial_id'], ['trials.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('trial_id', 'invariant', name='uq_verdicts_trial_invariant')
    )
    with op.batch_alter_table('verdicts', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_verdicts_trial_id'), ['trial_id'], unique=False)




def downgrade() -> None:

    with op.batch_alter_table('verdicts', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_verdicts_trial_id'))

    op.drop_table('verdicts')
    op.drop_table('receipts')
    with op.batch_alter_table('observations', schema=None) as batch_op:
        batch_op.drop_index('ix_observations_campaign')

    op.drop_table('observations')
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.drop_index('ix_events_campaign')

    op.drop_table('events')
    with op.batch_alter_table('cost_ledger', schema=None) as batch_op:
        batch_op.drop_index('ix_cost_campaign')

    op.drop_table('cost_ledger')
    with op.batch_alter_table('trials', schema=None) as batch_op:
        batch_op.drop_index('ix_trials_status')
        batch_op.drop_index(batch_op.f('ix_trials_signature'))
        batch_op.drop_index('ix_trials_campaign_status')

    op.drop_table('trials')
    with op.batch_alter_table('experience', schema=None) as batch_op:
        batch_op.drop_index('ix_experience_knob')

    op.drop_table('experience')
    with op.batch_alter_table('campaigns', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_campaigns_state'))

    op.drop_table('campaigns')
    op.drop_table('workloads')

